"""Token-level latency metrics: per-call formulas, the p1..p99 table, SLO parsing, goodput."""

from __future__ import annotations

import numpy as np
import pytest

from replay.driver.latency import call_latencies, goodput, parse_slo, percentile_table
from replay.driver.records import summarize
from replay.errors import ConfigError


def _row(**kw):
    row = {
        "task": "a", "call": 0, "slot": 0, "t_ready": 0.0, "t_send": 1.0, "t_first_token": 1.5,
        "t_end": 3.0, "drift_s": 0.0, "prompt_tokens": 10, "prompt_tokens_reported": 10,
        "max_tokens": 11, "completion_tokens": 11, "status": "ok", "error_kind": None,
    }  # fmt: skip
    row.update(kw)
    return row


def test_call_latencies_follow_their_formulas():
    lat = call_latencies(_row(t_second_token=1.7, t_last_token=2.5, stream_tokens=3))
    assert lat == pytest.approx(
        {"ttft_s": 0.5, "tt2t_s": 0.7, "itl_s": 0.1, "latency_s": 2.0, "one_token": False}
    )
    # no server count: the stream's own token count
    lat = call_latencies(_row(completion_tokens=None, t_last_token=2.5, stream_tokens=5))
    assert lat["itl_s"] == pytest.approx(0.25)
    assert call_latencies(_row(completion_tokens=1, t_last_token=1.5))["itl_s"] is None


def test_rows_written_before_the_stream_columns_still_summarize():
    old = [_row(call=i, t_end=3.0 + i) for i in range(4)]  # no t_second/t_last/stream_tokens
    s = summarize(old)
    assert s["tt2t_p50_s"] is None and s["itl_p50_s"] is None
    assert s["latency_p50_s"] == pytest.approx(3.5)
    assert s["latency_percentiles"]["ttft_s"]["p50"] == pytest.approx(0.5)


def test_percentile_table_matches_numpy():
    vals = list(np.random.default_rng(1).exponential(size=101))
    table = percentile_table(vals)
    assert table["p99"] == pytest.approx(np.percentile(vals, 99))
    assert table["p1"] < table["p50"] < table["p99"]
    assert percentile_table([]) == dict.fromkeys(table)


def test_parse_slo_units_and_errors():
    assert parse_slo("ttft=2s,itl=50ms") == {"ttft_s": 2.0, "itl_s": 0.05}
    assert parse_slo("latency=1.5s, tt2t=300us") == pytest.approx(
        {"latency_s": 1.5, "tt2t_s": 300e-6}
    )
    for bad in ("ttft=2", "foo=1s", "ttft=2h", ""):
        with pytest.raises(ConfigError, match="--slo"):
            parse_slo(bad)


def test_goodput_counts_calls_meeting_every_objective():
    per_call = [
        {"ttft_s": 1.0, "itl_s": 0.01},
        {"ttft_s": 3.0, "itl_s": 0.01},  # ttft too slow
        {"ttft_s": 1.0, "itl_s": None},  # not measured: not met
        {"ttft_s": 2.0, "itl_s": 0.05},  # on the limit: met
    ]
    g = goodput(per_call, calls=5, makespan_s=10.0, slo_s={"ttft_s": 2.0, "itl_s": 0.05})
    assert g["goodput_calls"] == 2
    assert g["goodput_fraction"] == pytest.approx(0.4) and g["goodput_per_s"] == pytest.approx(0.2)


def test_a_one_token_call_meets_an_itl_objective_and_an_unmeasured_one_is_said():
    """A call of one output token has no gap between tokens: it failed every ITL objective (1 of
    claude-code-small's calls). vLLM's benchmark takes its time per output token as 0 for
    goodput. And an objective no call measured (TT2T in the in-process simulator) gave goodput
    0 with no word."""
    from replay.driver.run import unmeasured_objectives

    one = call_latencies(_row(completion_tokens=1, t_last_token=1.5))
    assert one["itl_s"] is None and one["one_token"]
    g = goodput([one], calls=1, makespan_s=1.0, slo_s={"itl_s": 0.05})
    assert g["goodput_calls"] == 1
    assert goodput([one], calls=1, makespan_s=1.0, slo_s={"tt2t_s": 9.0})["goodput_calls"] == 0
    rows = [_row(call=i) for i in range(3)]  # no t_second_token: as the in-process simulator
    said = unmeasured_objectives(summarize(rows), {"tt2t_s": 9.0, "ttft_s": 2.0})
    assert len(said) == 1 and said[0].startswith("no call measured tt2t")
