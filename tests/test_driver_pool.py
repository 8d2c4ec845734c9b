"""Agent-pool semantics on virtual time: dependencies, slots, sub-agents, open loop, caps, faults.

The scripted transport gives each call a known service time; the checks are made on the records
the pool writes, against the rules of docs/driver.md (an independent statement of the schedule).
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.clock import run_virtual
from replay.driver.options import RunOptions
from replay.driver.pool import RunControl, replay
from replay.errors import TraceError
from replay.trace.synth import synth
from tests.servers import ScriptedTransport, make_trace

EPS = 1e-9


def run(trace, transport=None, **opts):
    transport = transport or ScriptedTransport()
    opts.setdefault("pool", 2)
    result = run_virtual(lambda: replay(trace, transport, RunOptions(**opts)))
    return result, {(r["task"], r["call"]): r for r in result.rows}, transport


def check_closed_loop(trace, rows, gap_scale=1.0):
    """Every call: ready = max(previous call end, `after` ends, spawning call end) + gap."""
    for task, calls in trace.tasks.items():
        for c in calls:
            r = rows[c.ref]
            assert r["t_send"] >= r["t_ready"] - EPS
            deps = [rows[ref]["t_end"] for ref in c.after]
            if c.index > 0:
                deps.append(rows[(task, c.index - 1)]["t_end"])
            elif c.parent is not None:
                deps.append(rows[c.parent]["t_end"])
            if deps:
                if c.index > 0 or c.parent is not None:
                    assert r["t_ready"] == pytest.approx(max(deps) + c.gap_s * gap_scale)
                else:
                    assert r["t_ready"] >= max(deps) + c.gap_s * gap_scale - EPS


def test_chain_calls_wait_for_previous_end_plus_gap():
    trace = make_trace({"a": [{"gap": 0.5}, {"gap": 2.0, "out": 10}, {"gap": 1.0}]})
    result, rows, tr = run(trace, ScriptedTransport(ttft_s=0.25, per_token_s=0.1))
    assert result.status == "ok" and len(rows) == 3
    # independent arithmetic: service = 0.25 + 0.1 * out
    assert rows[("a", 0)]["t_send"] == pytest.approx(0.5)
    assert rows[("a", 0)]["t_end"] == pytest.approx(0.5 + 0.25 + 0.4)
    assert rows[("a", 1)]["t_send"] == pytest.approx(1.15 + 2.0)
    assert rows[("a", 2)]["t_send"] == pytest.approx(3.15 + 1.25 + 1.0)
    assert rows[("a", 0)]["t_first_token"] - rows[("a", 0)]["t_send"] == pytest.approx(0.25)
    assert tr.started and tr.closed


def test_gap_scale_multiplies_gaps():
    trace = make_trace({"a": [{"gap": 1.0}, {"gap": 4.0}]})
    _, rows, _ = run(trace, ScriptedTransport(ttft_s=0.0, per_token_s=0.0), gap_scale=0.25)
    assert rows[("a", 1)]["t_send"] == pytest.approx(0.25 + 1.0)


def test_slots_take_tasks_in_trace_order_and_wait_tail_gap():
    tasks = {f"t{i}": [{"gap": 0.0, "out": 5 * (i + 1)}] for i in range(5)}
    tasks["t0"][0]["tail"] = 3.0
    trace = make_trace(tasks)
    result, rows, tr = run(trace, ScriptedTransport(ttft_s=0.1, per_token_s=0.1), pool=2)
    assert tr.peak_inflight == 2
    # t0 (0.6 s + 3 s tail) and t1 (1.1 s) start at 0; t2 takes t1's slot at 1.1
    assert rows[("t0", 0)]["t_send"] == rows[("t1", 0)]["t_send"] == 0.0
    assert rows[("t2", 0)]["t_send"] == pytest.approx(1.1)
    assert rows[("t2", 0)]["slot"] == rows[("t1", 0)]["slot"]
    # t0's slot is free only at 0.6 + 3.0 = 3.6; t2 ends at 2.7, so t3 takes t2's slot
    assert rows[("t3", 0)]["t_send"] == pytest.approx(2.7)
    assert rows[("t4", 0)]["t_send"] == pytest.approx(3.6)
    assert rows[("t4", 0)]["slot"] == rows[("t0", 0)]["slot"]
    firsts = [rows[(f"t{i}", 0)]["t_send"] for i in range(5)]
    assert firsts == sorted(firsts)


def test_subagents_start_at_spawn_run_beside_parent_and_join():
    trace = make_trace(
        {
            "p": [
                {"gap": 0.0},
                {"gap": 0.5, "after": [("p.s0", 1), ("p.s1", 0)]},
            ],
            "p.s0": [{"gap": 0.2, "parent": ("p", 0), "out": 20}, {"gap": 0.1}],
            "p.s1": [{"gap": 0.3, "parent": ("p", 0), "out": 50}],
            "q": [{"gap": 0.0}],
        }
    )
    result, rows, tr = run(trace, ScriptedTransport(ttft_s=0.1, per_token_s=0.01), pool=1)
    assert result.status == "ok" and len(rows) == 6
    check_closed_loop(trace, rows)
    p0_end = rows[("p", 0)]["t_end"]
    assert rows[("p.s0", 0)]["t_ready"] == pytest.approx(p0_end + 0.2)
    assert rows[("p.s1", 0)]["t_ready"] == pytest.approx(p0_end + 0.3)
    # the two sub-agents overlap although the pool has one slot
    assert rows[("p.s1", 0)]["t_send"] < rows[("p.s0", 0)]["t_end"]
    assert rows[("p", 1)]["t_ready"] == pytest.approx(
        max(rows[("p.s0", 1)]["t_end"], rows[("p.s1", 0)]["t_end"]) + 0.5
    )
    assert rows[("p.s0", 0)]["slot"] == rows[("p", 0)]["slot"]
    # the next root task waits for the slot: after p's last call
    assert rows[("q", 0)]["t_send"] >= rows[("p", 1)]["t_end"] - EPS


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    pool=st.integers(1, 6),
    ttft=st.floats(0.0, 2.0),
    per_token=st.floats(0.0, 0.05),
    gap_scale=st.sampled_from([0.0, 0.5, 1.0, 2.0]),
)
def test_closed_loop_order_holds_on_synthetic_traces(seed, pool, ttft, per_token, gap_scale):
    trace = synth("claude-code", tasks=5, seed=seed, scale=0.01, max_calls_per_task=8)
    transport = ScriptedTransport(ttft_s=ttft, per_token_s=per_token)
    result, rows, _ = run(trace, transport, pool=pool, gap_scale=gap_scale)
    assert result.status == "ok"
    assert len(rows) == len(trace)
    check_closed_loop(trace, rows, gap_scale)
    # at most `pool` root tasks are active at any time
    roots = trace.root_task_ids
    spans = [(rows[(t, 0)]["t_send"], rows[(t, len(trace.tasks[t]) - 1)]["t_end"]) for t in roots]
    for t_start, _ in spans:
        active = sum(1 for s, e in spans if s <= t_start + EPS and e > t_start + EPS)
        assert active <= pool


def test_open_loop_sends_at_arrival_times_whatever_the_server_does():
    trace = make_trace(
        {
            "a": [{"at": 0.0, "out": 100}, {"at": 0.5}],  # call 1 arrives before call 0 ends
            "b": [{"at": 0.25}],
        }
    )
    result, rows, tr = run(trace, ScriptedTransport(ttft_s=0.1, per_token_s=0.1), pool=1)
    assert result.open_loop and result.status == "ok"
    assert rows[("a", 0)]["t_send"] == 0.0
    assert rows[("b", 0)]["t_send"] == pytest.approx(0.25)
    assert rows[("a", 1)]["t_send"] == pytest.approx(0.5)
    assert rows[("a", 1)]["t_send"] < rows[("a", 0)]["t_end"]
    assert tr.peak_inflight == 3
    _, rows2, _ = run(trace, ScriptedTransport(ttft_s=0.1, per_token_s=0.1), gap_scale=2.0)
    assert rows2[("a", 1)]["t_send"] == pytest.approx(1.0)


def test_mixed_open_and_closed_trace_is_rejected():
    trace = make_trace({"a": [{"at": 0.0}], "b": [{"gap": 1.0}]})
    with pytest.raises(TraceError, match="at_s"):
        run(trace)
    backwards = make_trace({"a": [{"at": 2.0}, {"at": 1.0}]})
    with pytest.raises(TraceError, match="arrives before"):
        run(backwards)


def test_open_loop_stop_drops_calls_not_yet_sent():
    trace = make_trace({f"t{i}": [{"at": 0.5 * i, "out": 10}] for i in range(10)})
    control = RunControl()
    transport = ScriptedTransport(ttft_s=0.1, per_token_s=0.1)

    async def main():
        loop = asyncio.get_running_loop()
        loop.call_at(loop.time() + 2.0, control.stop)
        opts = RunOptions(pool=1, max_inflight=1, interrupt_grace_s=5.0)
        return await replay(trace, transport, opts, control=control)

    result = run_virtual(main)
    # one call at a time, 1.1 s each: t0 [0, 1.1]; t1 [1.1, 2.2] is in flight at the stop and
    # finishes in its grace; t2 and t3 wait for the cap, the rest have not arrived: none goes out
    sent = sorted(r["task"] for r in result.rows)
    assert sent == ["t0", "t1"]
    assert all(r["status"] == "ok" for r in result.rows)
    assert result.status == "interrupted" and result.skipped_calls == 8


def test_timing_original_keeps_recorded_start_to_start_pace():
    trace = make_trace(
        {
            "a": [
                {"gap": 0.0, "start": 10.0},
                {"gap": 9.0, "start": 13.0},
                {"gap": 9.0, "start": 20.0},
            ]
        }
    )
    fast = ScriptedTransport(ttft_s=0.5, per_token_s=0.0)
    _, rows, _ = run(trace, fast, timing="original")
    assert rows[("a", 1)]["t_send"] == pytest.approx(3.0)
    assert rows[("a", 2)]["t_send"] == pytest.approx(10.0)
    slow = ScriptedTransport(ttft_s=5.0, per_token_s=0.0)  # slower than the recording
    _, rows, _ = run(trace, slow, timing="original")
    assert rows[("a", 1)]["t_send"] == pytest.approx(5.0)  # never before the dependency ends


def test_errors_continue_by_default_and_abort_task_drops_the_rest():
    spec = {
        "a": [{}, {}, {}, {}],
        "b": [{}, {}],
        "a.sub": [{"parent": ("a", 2)}],
    }
    trace = make_trace(spec)
    fail = {("a", 1): "http_5xx"}
    result, rows, _ = run(trace, ScriptedTransport(fail=fail))
    assert result.status == "errors" and len(rows) == 7
    assert rows[("a", 1)]["status"] == "error" and rows[("a", 1)]["error_kind"] == "http_5xx"
    assert rows[("a", 2)]["status"] == "ok"

    result, rows, _ = run(trace, ScriptedTransport(fail=fail), on_error="abort-task")
    assert result.status == "errors"
    assert set(rows) == {("a", 0), ("a", 1), ("b", 0), ("b", 1)}
    assert result.skipped_calls == 3  # a/2, a/3 and the sub-agent a/2 would have spawned

    fail = {("a", 2): "http_5xx"}  # the spawning call itself fails: its sub-agent never runs
    result, rows, _ = run(trace, ScriptedTransport(fail=fail), on_error="abort-task")
    assert ("a.sub", 0) not in rows and ("a", 3) not in rows and len(rows) == 5
    result, rows, _ = run(trace, ScriptedTransport(fail=fail))
    assert ("a.sub", 0) in rows  # with continue the task goes on as recorded


def test_join_on_an_aborted_subagent_does_not_hang():
    trace = make_trace(
        {
            "p": [{}, {"after": [("p.s", 1)]}],
            "p.s": [{"parent": ("p", 0)}, {}],
        }
    )
    result, rows, _ = run(
        trace, ScriptedTransport(fail={("p.s", 0): "timeout"}), on_error="abort-task"
    )
    assert ("p", 1) in rows and ("p.s", 1) not in rows
    assert result.status == "errors"


def test_length_mismatches_are_counted_and_strict_fails_the_run():
    trace = make_trace({"a": [{}, {}, {}], "b": [{}, {}, {}]})

    def off(req):
        return (len(req.prompt) + (req.task == "a" and req.call == 1), req.max_tokens)

    result, rows, _ = run(trace, ScriptedTransport(report=off))
    assert result.status == "ok" and len(rows) == 6
    assert rows[("a", 1)]["prompt_tokens_reported"] == rows[("a", 1)]["prompt_tokens"] + 1

    result, rows, _ = run(trace, ScriptedTransport(report=off), strict=True, pool=1)
    assert result.status == "failed" and "length mismatch" in result.reason
    assert rows[("a", 1)]["error_kind"] == "length_mismatch"
    assert ("a", 2) not in rows and ("b", 0) not in rows


def test_max_inflight_caps_concurrency_and_max_rps_spaces_sends():
    trace = make_trace({f"t{i}": [{}, {}] for i in range(8)})
    _, rows, tr = run(trace, ScriptedTransport(), pool=8, max_inflight=3)
    assert tr.peak_inflight == 3
    _, rows, _ = run(trace, ScriptedTransport(), pool=8, max_rps=4.0)
    sends = sorted(r["t_send"] for r in rows.values())
    assert min(np.diff(sends)) >= 0.25 - EPS


def test_truncation_forcing_and_engine_extras():
    trace = make_trace({"a": [{"new": 50, "out": 6}, {"new": 50, "out": 3}]})
    seen = []

    def extras(max_tokens, forced):
        seen.append((max_tokens, forced))
        return {"vllm_xargs": {"n": max_tokens}}

    transport = ScriptedTransport()
    result, rows, _ = run(
        trace, transport, forcing=True, truncate_prompt_tokens=60, request_extras=extras
    )
    assert [len(r.prompt) for r in transport.requests] == [50, 60]
    assert rows[("a", 1)]["prompt_tokens"] == 60
    assert seen[0][0] == 6 and seen[0][1] == trace.output_ids(trace.tasks["a"][0]).tolist()
    assert transport.requests[0].extras == {"vllm_xargs": {"n": 6}}
    assert rows[("a", 0)]["exact_match"] == 1.0


def test_same_trace_same_records_bit_for_bit():
    trace = synth("claude-code", tasks=6, seed=3, scale=0.01, max_calls_per_task=6)
    a, _, _ = run(trace, ScriptedTransport(ttft_s=0.3, per_token_s=0.02), pool=3)
    b, _, _ = run(trace, ScriptedTransport(ttft_s=0.3, per_token_s=0.02), pool=3)
    assert a.rows == b.rows


def test_stop_from_outside_sends_nothing_more_and_leaves_nothing_running():
    trace = make_trace({f"t{i}": [{"gap": 1.0}] * 5 for i in range(4)})
    control = RunControl()
    transport = ScriptedTransport(ttft_s=0.5, per_token_s=0.5)

    async def main():
        loop = asyncio.get_running_loop()
        loop.call_at(loop.time() + 2.0, control.stop)
        return await replay(
            trace, transport, RunOptions(pool=2, interrupt_grace_s=0.1), control=control
        )

    result = run_virtual(main)
    assert result.status == "interrupted"
    assert max(r["t_send"] for r in result.rows) < 2.0
    cancelled = [r for r in result.rows if r["error_kind"] == "cancelled"]
    assert cancelled and all(r["t_end"] == pytest.approx(2.1) for r in cancelled)
    assert len(cancelled) == 2 and len(result.rows) == 2
    assert transport.inflight == 0 and transport.closed


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    pool=st.integers(1, 4),
    fail_every=st.integers(2, 7),
    on_error=st.sampled_from(["continue", "abort-task"]),
)
def test_faults_never_hang_and_abort_drops_exactly_the_rest(seed, pool, fail_every, on_error):
    trace = synth("claude-code", tasks=6, seed=seed, scale=0.01, max_calls_per_task=6)
    fail = {c.ref: "http_5xx" for k, c in enumerate(trace.calls) if k % fail_every == 1}
    # the virtual loop raises if anything waits forever, so finishing is the no-hang check
    result, rows, _ = run(trace, ScriptedTransport(fail=fail), pool=pool, on_error=on_error)
    assert len(rows) + result.skipped_calls == len(trace)
    check_closed_loop_where_sent(trace, rows)
    if on_error == "continue":
        assert len(rows) == len(trace)
    else:
        # a task that failed sends nothing after the failure; sub-agents of unsent calls never run
        for task, calls in trace.tasks.items():
            sent = [c.index for c in calls if c.ref in rows]
            failed = [i for i in sent if rows[(task, i)]["status"] == "error"]
            if failed:
                assert max(sent) == failed[0]
            parent = calls[0].parent
            if parent is not None and (parent not in rows or rows[parent]["status"] != "ok"):
                assert not sent


def check_closed_loop_where_sent(trace, rows):
    for c in trace.calls:
        if c.ref not in rows:
            continue
        r = rows[c.ref]
        deps = [rows[ref]["t_end"] for ref in c.after if ref in rows]
        if c.index > 0:
            deps.append(rows[(c.task, c.index - 1)]["t_end"])
        for d in deps:
            assert r["t_send"] >= d + c.gap_s - EPS


def test_hurry_cancels_in_flight_calls_without_waiting_for_the_grace():
    trace = make_trace({"a": [{"out": 100}], "b": [{"out": 100}]})
    control = RunControl()

    async def main():
        loop = asyncio.get_running_loop()
        loop.call_at(loop.time() + 1.0, control.stop)
        loop.call_at(loop.time() + 1.5, control.hurry)
        opts = RunOptions(pool=2, interrupt_grace_s=60.0)
        return await replay(
            trace, ScriptedTransport(ttft_s=0.1, per_token_s=1.0), opts, control=control
        )

    result = run_virtual(main)
    assert result.status == "interrupted"
    assert [r["t_end"] for r in result.rows] == [pytest.approx(1.5)] * 2
    assert {r["error_kind"] for r in result.rows} == {"cancelled"}


def test_signal_outside_the_loop_is_raised_again_after_the_directory_is_written(tmp_path):
    import signal

    import orjson

    from replay.driver.run import run_replay

    def counters():  # runs after the loop has finished: no loop handles this signal
        signal.raise_signal(signal.SIGINT)
        return {"preemptions": 0}

    trace = make_trace({"a": [{}, {}]})
    # the caller's handler is Python's own, whatever an earlier test or the runner left installed
    # (an ignored SIGINT would be redelivered to SIG_IGN and rightly raise nothing)
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    before = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_replay(
                trace, ScriptedTransport, RunOptions(pool=1), tmp_path, virtual=True,
                counters_fn=counters,
            )  # fmt: skip
    finally:
        after = signal.signal(signal.SIGINT, outer)
    doc = orjson.loads((tmp_path / "run.json").read_bytes())
    assert doc["status"] == "ok" and doc["summary"]["calls"] == 2
    assert after is before  # the caller's handler is back
