"""Call records: jsonl streaming survives a cut, parquet keeps the schema, the summary formulas."""

from __future__ import annotations

import pandas as pd
import pytest

from replay.driver.records import (
    CALL_COLUMNS,
    JsonlSink,
    read_jsonl,
    summarize,
    write_parquet,
)


def row(task, call, t_send, t_end, *, ttft=None, status="ok", kind=None, **kw):
    r = dict.fromkeys(CALL_COLUMNS)
    r.update(
        task=task, call=call, slot=0, t_ready=t_send, t_send=t_send, t_end=t_end,
        t_first_token=None if ttft is None else t_send + ttft, drift_s=0.0,
        prompt_tokens=100, max_tokens=10, completion_tokens=10, prompt_tokens_reported=100,
        status=status, error_kind=kind,
    )  # fmt: skip
    r.update(kw)
    return r


def test_jsonl_survives_a_cut_last_line_and_converts_to_parquet(tmp_path):
    sink = JsonlSink(tmp_path / "calls.jsonl")
    rows = [row("a", i, float(i), i + 0.5, ttft=0.1) for i in range(3)]
    for r in rows:
        sink(r)
    sink.close()
    with open(tmp_path / "calls.jsonl", "ab") as f:
        f.write(b'{"task": "a", "call": 3, "t_se')  # a crash mid-write
    back = read_jsonl(tmp_path / "calls.jsonl")
    assert back == rows
    write_parquet(back, tmp_path / "calls.parquet")
    df = pd.read_parquet(tmp_path / "calls.parquet")
    assert list(df.columns) == list(CALL_COLUMNS) and len(df) == 3
    write_parquet([], tmp_path / "empty.parquet")
    assert list(pd.read_parquet(tmp_path / "empty.parquet").columns) == list(CALL_COLUMNS)


def test_summary_formulas_on_a_hand_worked_run():
    rows = [
        row("a", 0, 1.0, 2.0, ttft=0.2, cached_tokens=40),
        row("a", 1, 3.0, 5.0, ttft=0.4, cached_tokens=60, completion_tokens=9),
        row("b", 0, 2.0, 6.0, ttft=0.6, prompt_tokens_reported=101),
        row("b", 1, 7.0, 7.5, status="error", kind="http_5xx", completion_tokens=None),
    ]
    s = summarize(rows, loop_lag_s=[0.001, 0.002])
    assert s["makespan_s"] == 6.5  # first send 1.0, last end 7.5
    assert (s["calls"], s["errors"]) == (4, 1)
    assert s["prompt_tokens"] == 300 and s["output_tokens"] == 29
    assert s["cached_tokens"] == 100  # b/0 did not report: summed over those that did
    assert s["ttft_p50_s"] == pytest.approx(0.4)
    assert s["jct_p50_s"] == pytest.approx((4.0 + 5.5) / 2)  # a: 1->5, b: 2->7.5
    assert s["prompt_mismatches"] == 1 and s["completion_mismatches"] == 1
    assert s["error_kinds"] == {"http_5xx": 1}
    assert s["host_restore_tokens"] is None and s["preemptions"] is None
    assert s["exact_match_rate"] is None


def test_drift_leaves_out_calls_that_never_connected():
    rows = [
        row("a", 0, 1.0, 2.0, ttft=0.1, drift_s=0.002),
        row("b", 0, 31.0, 31.0, status="error", kind="connection", drift_s=30.0),  # retried 30 s
        row("c", 0, 2.0, 3.0, status="error", kind="http_5xx", drift_s=0.004),
    ]
    s = summarize(rows)
    assert s["drift_max_s"] == 0.004 and s["drift_p50_s"] == pytest.approx(0.003)


def test_server_counters_override_unknowns_but_not_client_token_counts():
    rows = [row("a", 0, 0.0, 1.0, device_hit_tokens=30, host_restore_tokens=20)]
    s = summarize(rows)
    assert s["computed_prefill_tokens"] == 50
    s = summarize(rows, counters={"prompt_tokens": 7, "host_write_tokens": 64, "preemptions": 0})
    assert s["prompt_tokens"] == 100 and s["host_write_tokens"] == 64 and s["preemptions"] == 0
