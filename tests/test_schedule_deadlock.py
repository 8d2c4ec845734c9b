"""Waits that can never end: a call joining a root task that only starts once a slot frees.

`trace validate --pool A` and `replay run` refuse such a trace before anything is sent; the pool
itself, run without that check, fails the run with a reason instead of hanging (wall clock over
HTTP to the simulator server, and virtual time on the in-process simulator).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from replay.driver.options import RunOptions
from replay.driver.run import run_replay
from replay.errors import TraceError
from replay.trace.io import read_trace, write_trace
from replay.trace.schedule import check_pool, smallest_pool
from tests.servers import ScriptedTransport, make_trace
from tests.test_driver_cli import sim_server  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parents[1]
REPLAY = [sys.executable, "-m", "replay.cli.main"]


def deadlock_trace(n_roots: int = 2):
    """Root task a's second call waits on the last root task, which starts after all the others."""
    last = f"r{n_roots - 1}"
    tasks = {"a": [{"out": 3}, {"after": [(last, 0)]}]}
    for i in range(1, n_roots):
        tasks[f"r{i}"] = [{"out": 2}, {"out": 2}]
    return make_trace(tasks)


@pytest.fixture
def deadlock_file(tmp_path) -> Path:
    path = tmp_path / "deadlock.jsonl"
    write_trace(deadlock_trace(), path)
    return path


def _replay(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*REPLAY, *args], capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_the_check_names_who_waits_on_whom_and_the_smallest_pool(deadlock_file):
    trace = read_trace(deadlock_file)
    with pytest.raises(TraceError) as e:
        check_pool(trace, 1)
    msg = e.value.format()
    assert msg.startswith(f"{deadlock_file}:3: after: with a pool of 1, ")  # a/1 is on line 3
    assert "task 'a' call 1 waits on task 'r1' call 0" in msg
    assert "smallest pool that runs it is 2" in msg
    check_pool(trace, 2)  # both roots start at once: nothing waits forever


@pytest.mark.parametrize("n_roots", [2, 3, 5])
def test_smallest_pool_is_one_slot_per_root_that_must_run_at_once(n_roots):
    trace = deadlock_trace(n_roots)
    # a holds its slot until r{n-1} has run; r1..r{n-2} can finish and free theirs meanwhile
    assert smallest_pool(trace) == 2
    for pool in range(2, n_roots + 1):
        check_pool(trace, pool)


def test_a_chain_of_joins_needs_every_root_at_once():
    # a waits on b's end, b on c's: with fewer slots than roots somebody waits forever
    trace = make_trace(
        {"a": [{}, {"after": [("b", 1)]}], "b": [{}, {"after": [("c", 0)]}], "c": [{}]}
    )
    assert smallest_pool(trace) == 3
    with pytest.raises(TraceError) as e:
        check_pool(trace, 2)
    assert (
        "with a pool of 2, task 'a' call 1 waits on task 'b' call 1, which waits on task 'c' "
        "call 0, a task that never starts: the 2 slot(s) hold 'a', 'b'"
    ) in str(e.value)
    assert str(e.value).endswith("the smallest pool that runs it is 3")


def test_trace_validate_checks_a_pool_size(deadlock_file):
    cp = _replay("trace", "validate", str(deadlock_file))
    assert cp.returncode == 0, cp.stdout + cp.stderr  # the file itself is well formed
    cp = _replay("trace", "validate", str(deadlock_file), "--pool", "1")
    assert cp.returncode == 2
    assert cp.stdout.strip().startswith(f"{deadlock_file}:3: after: with a pool of 1")
    assert "Traceback" not in cp.stdout + cp.stderr
    assert _replay("trace", "validate", str(deadlock_file), "--pool", "2").returncode == 0


@pytest.mark.timeout(60)
def test_run_refuses_before_sending_on_both_engines(deadlock_file, tmp_path, sim_server):  # noqa: F811
    for engine in (["--engine", "sim"], ["--url", sim_server]):
        out = tmp_path / engine[0].strip("-")
        cp = _replay(
            "run", "--trace", str(deadlock_file), "--pool", "1", "--out", str(out), *engine
        )
        assert cp.returncode == 2, cp.stderr
        assert "waits on task 'r1' call 0" in cp.stderr and "smallest pool" in cp.stderr
        assert "Traceback" not in cp.stderr
        assert not out.exists()  # nothing was sent, nothing written
    cp = _replay(
        "run", "--trace", str(deadlock_file), "--pool", "2", "--out", str(tmp_path / "ok"),
        "--engine", "sim", "--json",
    )  # fmt: skip
    assert cp.returncode == 0 and orjson.loads(cp.stdout)["calls"] == 4


def _assert_failed_with_a_reason(summary, out: Path):
    assert summary["status"] == "failed"
    assert "deadlock: task 'a' call 1 waits on task 'r1' call 0" in summary["reason"]
    run = orjson.loads((out / "run.json").read_bytes())
    assert run["status"] == "failed" and "deadlock" in run["reason"]
    assert summary["calls"] == 1 and summary["calls_skipped"] == 3  # only a/0 could run


@pytest.mark.timeout(60)
def test_the_pool_fails_a_wait_that_can_never_end_in_virtual_time(tmp_path):
    from replay.sim.options import SimConfig
    from replay.sim.transport import SimTransport

    trace = deadlock_trace()  # straight to the pool: no check before
    summary = run_replay(
        trace,
        lambda: SimTransport(SimConfig.from_options(), vocab_size=trace.header.vocab_size),
        RunOptions(pool=1),
        tmp_path,
        virtual=True,
    )  # before: RuntimeError "virtual-time loop would wait forever"
    _assert_failed_with_a_reason(summary, tmp_path)


@pytest.mark.timeout(60)
def test_the_pool_fails_a_wait_that_can_never_end_over_http(tmp_path, sim_server):  # noqa: F811
    from replay.driver.http import http_transport_factory

    trace = deadlock_trace()
    opts = RunOptions(pool=1)
    factory = http_transport_factory(sim_server, trace, opts, model="sim")
    summary = run_replay(trace, factory, opts, tmp_path)  # before: hung after a/0
    _assert_failed_with_a_reason(summary, tmp_path)


def test_a_wait_freed_by_a_later_slot_is_not_a_deadlock():
    # with 2 slots: a waits on r2, which starts when r1's slot frees: slow, but it ends
    from replay.clock import run_virtual
    from replay.driver.pool import replay

    trace = deadlock_trace(3)
    result = run_virtual(lambda: replay(trace, ScriptedTransport(), RunOptions(pool=2)))
    assert result.status == "ok" and len(result.rows) == len(trace)
    rows = {(r["task"], r["call"]): r for r in result.rows}
    assert rows[("a", 1)]["t_send"] >= rows[("r2", 0)]["t_end"]


def test_the_models_refuse_a_pool_that_the_run_would_refuse():
    from replay.model.order import closed_loop_schedule
    from replay.model.wholeprompt import WholePromptConfig
    from replay.model.wholeprompt_loop import simulate_closed_loop

    trace = deadlock_trace()
    with pytest.raises(TraceError, match="waits on task 'r1' call 0"):
        closed_loop_schedule(trace, 1)
    with pytest.raises(TraceError, match="smallest pool that runs it is 2"):
        simulate_closed_loop(trace, 1, WholePromptConfig(2, 1, 1024.0))
    assert len(closed_loop_schedule(trace, 2)) == len(trace)
