"""The glue of `make bench-peers`: AIPerf input rows, its command line, reading its export,
lateness and rate, and the process-tree CPU measure. No AIPerf and no timing assertions here."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import numpy as np
import orjson
import pytest

from benchmarks.bench_peers import summarize
from benchmarks.peers_aiperf import (
    TOKENIZER_REPO,
    body,
    command,
    lateness_s,
    rate_per_s,
    read_export,
    write_rows,
)
from benchmarks.proc_tree import run_measured
from replay.trace.model import Call, Trace, TraceHeader

REPO = Path(__file__).resolve().parents[1]


def _closed_trace() -> Trace:
    ids = [np.arange(i * 10, i * 10 + 5, dtype=np.int32) for i in range(4)]
    calls = [
        Call("a", 0, 0.0, 0, ids[0], 5, 3),
        Call("a", 1, 0.0, 8, ids[1], 13, 2),  # keeps a's prompt and output, appends 5
        Call("b", 0, 0.0, 0, ids[2], 5, 4),
        Call("b", 1, 0.0, 9, ids[3], 14, 1),
    ]
    return Trace(TraceHeader(vocab_size=100), calls)


def _open_trace() -> Trace:
    calls = [
        Call(f"t{i}", 0, 0.0, 0, np.array([i, i + 1], dtype=np.int32), 2, 1, at_s=at)
        for i, at in enumerate([1000.0, 1000.5, 1003.0])
    ]
    return Trace(TraceHeader(vocab_size=100), calls)


def _rows(path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def test_rows_carry_each_calls_exact_prompt_as_a_verbatim_body_in_the_given_order(tmp_path):
    trace = _closed_trace()
    order = [0, 2, 1, 3]  # first calls first, as replay's slots reach them
    offsets = write_rows(trace, tmp_path / "r.jsonl", "zero", order=order)
    rows = _rows(tmp_path / "r.jsonl")
    assert offsets == {}
    assert [r["session_id"] for r in rows] == ["c0", "c2", "c1", "c3"]
    assert all("timestamp" not in r for r in rows)
    for row, i in zip(rows, order, strict=True):
        call = trace.calls[i]
        assert row["payload"] == body(
            "zero", call.task, trace.prompt(call).tolist(), call.output_len
        )
        assert row["output_length"] == call.output_len
        assert list(row["payload"])[-1] == "prompt"  # the zero server reads the fields before it
    # the second call of `a` is the whole context so far plus the appended ids
    a1 = rows[2]["payload"]["prompt"]
    assert len(a1) == 13 and a1[-5:] == list(range(10, 15)) and a1[:5] == list(range(5))


def test_open_loop_rows_are_scheduled_at_arrival_over_speedup_in_ms(tmp_path):
    offsets = write_rows(_open_trace(), tmp_path / "r.jsonl", "zero", speedup=100.0)
    rows = _rows(tmp_path / "r.jsonl")
    assert offsets == pytest.approx({"c0": 0.0, "c1": 5.0, "c2": 30.0})
    assert [r["timestamp"] for r in rows] == pytest.approx([0.0, 5.0, 30.0])


def test_command_uses_concurrency_or_the_fixed_schedule(tmp_path):
    closed = command("aiperf", "http://h:1", tmp_path / "r", tmp_path / "a", concurrency=64,
                     requests=256, fixed_schedule=False)  # fmt: skip
    assert closed[:2] == ["aiperf", "profile"]
    assert closed[closed.index("--concurrency") + 1] == "64"
    assert closed[closed.index("--request-count") + 1] == "256"
    assert "--no-fixed-schedule" in closed and "--fixed-schedule" not in closed
    assert closed[closed.index("--tokenizer") + 1] == TOKENIZER_REPO
    assert closed[closed.index("--custom-dataset-type") + 1] == "mooncake_trace"
    fixed = command("aiperf", "http://h:1", tmp_path / "r", tmp_path / "a", concurrency=None,
                    requests=3, fixed_schedule=True)  # fmt: skip
    assert "--fixed-schedule" in fixed and "--fixed-schedule-auto-offset" in fixed
    assert "--concurrency" not in fixed


def _export(art, start_ns: int, records: list[dict]) -> None:
    art.mkdir()
    lines = [
        orjson.dumps(
            {
                "metadata": {"conversation_id": s, "request_start_ns": a, "request_end_ns": b},
                "error": err,
            }
        )  # fmt: skip
        for s, a, b, err in records
    ]
    (art / "profile_export.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    start = datetime.fromtimestamp(start_ns / 1e9).isoformat()  # local time, as AIPerf writes it
    (art / "profile_export_aiperf.json").write_bytes(orjson.dumps({"start_time": start}))


def test_lateness_is_send_minus_phase_start_plus_offset(tmp_path):
    t0 = 1_796_302_203_385_414_000  # a whole microsecond: the export keeps microseconds
    ms = 1_000_000
    _export(tmp_path / "a", t0, [
        ("c1", t0 + 7 * ms, t0 + 9 * ms, None),  # scheduled at 5 ms: 2 ms late
        ("c0", t0 + 1 * ms, t0 + 3 * ms, None),  # scheduled at 0: 1 ms late
        ("c2", t0 + 30 * ms, t0 + 40 * ms, {"type": "InvalidInferenceResultError"}),
    ])  # fmt: skip
    records, start_ns = read_export(tmp_path / "a")
    assert start_ns == t0
    assert [r["error"] for r in records] == [None, None, "InvalidInferenceResultError"]
    late = lateness_s(records, start_ns, {"c0": 0.0, "c1": 5.0, "c2": 30.0})
    assert late == pytest.approx([0.002, 0.001, 0.0], abs=1e-9)
    with pytest.raises(ValueError, match="unknown session 'c1'"):
        lateness_s(records, start_ns, {"c0": 0.0, "c2": 30.0})


def test_a_record_without_its_times_names_file_and_line(tmp_path):
    _export(tmp_path / "a", 10**18, [("c0", 1, 2, None)])
    with open(tmp_path / "a" / "profile_export.jsonl", "ab") as f:
        f.write(b'{"metadata": {"conversation_id": "c1"}}\n')
    with pytest.raises(ValueError, match=r"profile_export.jsonl:2: metadata: .*request_start_ns"):
        read_export(tmp_path / "a")


def test_rate_counts_requests_over_first_send_to_last_end():
    assert rate_per_s([10.0, 10.5, 11.0], [10.2, 11.5, 12.0]) == pytest.approx(1.5)


def _busy(cpu_s: float) -> str:
    return f"import time\nwhile time.process_time() < {cpu_s}: pass\n"


def test_tree_cpu_counts_a_child_the_command_never_waits_for(tmp_path):
    # the parent starts a CPU-bound child and exits without waiting for it: wait4 on the
    # parent cannot see the child; the /proc samples do. The child says when it has burnt
    # 0.2 s, and the parent lingers a few sampling intervals after that before it exits.
    child = _busy(0.2) + "print('burnt', flush=True)\n" + _busy(0.5)
    code = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', {child!r}], stdout=subprocess.PIPE)\n"
        "p.stdout.readline()\n"
        "time.sleep(0.2)\n"
    )
    m = run_measured([sys.executable, "-c", code], interval_s=0.02)
    assert m["rc"] == 0 and m["processes"] >= 2
    assert m["cpu_sampled_s"] >= m["cpu_waited_s"] + 0.15
    assert m["cpu_s"] == m["cpu_sampled_s"]


def test_tree_cpu_counts_a_waited_child_and_the_exit_code(tmp_path):
    code = (
        "import subprocess, sys\n"
        f"subprocess.run([sys.executable, '-c', {_busy(0.3)!r}], check=True)\n"
        "sys.exit(3)\n"
    )
    m = run_measured([sys.executable, "-c", code], interval_s=0.02, log=tmp_path / "log")
    assert m["rc"] == 3
    assert m["cpu_waited_s"] >= 0.3  # the child's own CPU, through the parent's wait
    assert m["cpu_s"] >= m["cpu_waited_s"]


def _cpu_rep(ms: float) -> dict:
    return {"cpu_ms_per_request": ms}


def _late_rep(p99: float) -> dict:
    return {"lateness_p99_ms": p99}


def test_summary_takes_the_median_ratio_and_checks_the_goals():
    cpu = {"replay": [_cpu_rep(2.0), _cpu_rep(4.0), _cpu_rep(1.0)],
           "aiperf": [_cpu_rep(20.0), _cpu_rep(16.0), _cpu_rep(3.0)]}  # fmt: skip
    late = {"replay": [_late_rep(2.0), _late_rep(9.0), _late_rep(3.0)],
            "aiperf": [_late_rep(5.0), _late_rep(6.0), _late_rep(1.0)]}  # fmt: skip
    out = summarize(cpu, late, 256, _open_trace())
    assert out["aiperf_over_replay_cpu_per_request"] == 4.0  # ratios 10, 4, 3
    assert out["aiperf_over_replay_cpu_spread"] == "4.0 [3.0-10.0]"
    assert out["lateness_p99_ms"] == {"replay": 3.0, "aiperf": 5.0}
    assert out["goals"] == {
        "aiperf_over_replay_cpu>=5x": False,
        "replay_lateness_p99<=aiperf": True,
    }
    # without the Mooncake slice its goal is unmet (None), not absent: absent read as met
    without = summarize(cpu, late, 256, None)
    assert without["goals"]["replay_lateness_p99<=aiperf"] is None
    assert "missing" in without["mooncake"]["skipped"]


def test_a_goal_compares_the_unrounded_median():
    """Ratios 4.996, 4.996, 4.996 print as 5.0 but are under 5: the goal was met on the rounding."""
    cpu = {"replay": [_cpu_rep(1.0)] * 3, "aiperf": [_cpu_rep(4.996)] * 3}
    out = summarize(cpu, {}, 256, None)
    assert out["aiperf_over_replay_cpu_per_request"] == 5.0
    assert out["goals"]["aiperf_over_replay_cpu>=5x"] is False


def test_a_run_with_a_failed_request_stops_the_bench(tmp_path):
    """A failed request costs the client little CPU; counted, it lowered the CPU per request."""
    from benchmarks.bench_peers import _all_served

    log = tmp_path / "r.log"
    log.write_text("connection refused\n")
    _all_served("replay run", {"requests": 256, "errors": 0}, 256, log)
    for m in ({"requests": 256, "errors": 3}, {"requests": 250, "errors": 0}):
        with pytest.raises(SystemExit, match="of 256 requests served ok"):
            _all_served("replay run", m, 256, log)


def test_without_aiperf_installed_the_bench_says_how_in_one_line_and_exits_2(tmp_path):
    env = {**os.environ, "BENCH_PEERS_AIPERF_VENV": str(tmp_path / "none")}
    got = subprocess.run([sys.executable, "-m", "benchmarks.bench_peers"], env=env,
                         capture_output=True, text=True, cwd=REPO)  # fmt: skip
    assert got.returncode == 2
    assert got.stderr.strip().splitlines() == [
        f"bench-peers: {tmp_path / 'none'}/bin/aiperf: missing: run `make bench-peers`, "
        "which installs it"
    ]
