"""bench_sim's pool floor: a transport with no engine, so a replay through it costs the pool alone."""

from __future__ import annotations

import pytest

from benchmarks.bench_sim import SleepTransport, pool_floor_cpu_s, work_floor_cpu_s
from replay.clock import VirtualTimeLoop
from replay.driver.options import RunOptions
from replay.driver.pool import replay
from replay.trace.synth import synth


def _trace():
    return synth("swe-agent", tasks=3, seed=1, scale=0.05, max_calls_per_task=4)


def test_sleep_transport_serves_every_call_in_its_stated_time():
    trace = _trace()
    loop = VirtualTimeLoop()
    try:
        res = loop.run_until_complete(
            replay(trace, SleepTransport(), RunOptions(pool=2, forcing=True))
        )
    finally:
        loop.close()
    assert res.status == "ok" and len(res.rows) == len(trace) > 4
    for r in res.rows:
        assert r["status"] == "ok" and r["prompt_tokens_reported"] == r["prompt_tokens"]
        assert r["t_end"] - r["t_send"] == pytest.approx(0.2 + r["prompt_tokens"] * 1e-6)
        assert r["exact_match"] == 1.0  # the forced output comes back as it was sent


def test_pool_floor_runs_the_whole_trace():
    assert pool_floor_cpu_s(_trace()) > 0


def test_work_floor_expands_keys_and_rows_every_call():
    trace = _trace()
    assert work_floor_cpu_s(trace) > 0


def test_a_points_records_hash_alike_in_every_repetition_and_a_change_shows():
    """The digest the bench compares across repetitions: the same point twice hashes the same,
    another tier size (other records) does not, and the summary says whether they agree."""
    import dataclasses

    from benchmarks.bench_sim import CONFIG, _point, _summary

    trace = _trace()
    small = dataclasses.replace(CONFIG, device_kv_gib=0.02, host_tier_gib=0.05)
    a, b = _point(trace, small), _point(trace, small)
    other = _point(trace, dataclasses.replace(small, host_tier_gib=0.0))
    assert a["records_sha256"] == b["records_sha256"] != other["records_sha256"]
    assert _summary([a, b])["records_identical"] is True
    assert _summary([a, other])["records_identical"] is False
