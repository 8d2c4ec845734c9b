"""Reference schedules: the closed loop's dependencies, hand-worked times, and recorded runs."""

import dataclasses

import numpy as np
import orjson
import pytest

from replay.errors import ConfigError
from replay.model.order import (
    EngineQueue,
    ServiceModel,
    closed_loop_order,
    closed_loop_schedule,
    trace_schedule,
)
from replay.model.presets import HARDWARE, MODELS
from replay.model.run_order import parse_order, read_run_order, read_run_schedule
from replay.trace.model import Trace
from tests.model_traces import make_trace

# 1 token of prefill = 1 ms, 1 output token = 0.1 s
SVC = ServiceModel(prefill_tokens_per_s=1000.0, decode_tokens_per_s=10.0)


def two_tasks_with_gaps() -> Trace:
    tasks = {
        "a": [([1] * 100, [2] * 10), ([1] * 100 + [2] * 10 + [3] * 50, [4] * 20)],
        "b": [([5] * 200, [6] * 5)],
    }
    return make_trace(tasks, gaps={("a", 0): 1.0, ("a", 1): 2.0, ("b", 0): 0.5})


def test_pool_of_one_runs_tasks_back_to_back_by_hand():
    s = closed_loop_schedule(two_tasks_with_gaps(), 1, service=SVC)
    # a0: sent at 1.0 (gap), prefill 100 tokens = 0.1 s, 10 outputs = 1 s -> ends 2.1
    # a1: sent 2.1 + 2.0 = 4.1, new tokens 160 - 110 kept = 50 -> 0.05 s, 20 outputs -> ends 6.15
    # b0: the slot frees at 6.15, gap 0.5 -> 6.65, 200 tokens -> 0.2 s, 5 outputs -> ends 7.35
    assert s.refs == [("a", 0), ("a", 1), ("b", 0)]
    np.testing.assert_allclose(s.t_lookup_s, [1.0, 4.1, 6.65])
    np.testing.assert_allclose(s.t_prefill_s, [1.1, 4.15, 6.85])
    np.testing.assert_allclose(s.t_end_s, [2.1, 6.15, 7.35])


def test_pool_of_two_interleaves():
    s = closed_loop_schedule(two_tasks_with_gaps(), 2, service=SVC)
    assert s.refs == [("b", 0), ("a", 0), ("a", 1)]
    assert s.t_lookup_s[0] == pytest.approx(0.5)


def with_sub_agent() -> Trace:
    base = two_tasks_with_gaps()
    calls = list(base.calls)
    a0 = calls[0]
    sub = dataclasses.replace(
        calls[2],
        task="a/sub",
        index=0,
        gap_s=0.25,
        parent=("a", 0),
        append=np.array([7] * 30, np.int32),
    )
    sub = dataclasses.replace(sub, prompt_len=30)
    a1 = dataclasses.replace(calls[1], after=(("a/sub", 0),))
    return Trace(base.header, [a0, a1, sub, calls[2]])


def test_sub_agent_starts_at_its_parents_end_and_the_join_waits_for_it():
    trace = with_sub_agent()
    s = closed_loop_schedule(trace, 1, service=SVC)
    t = {r: (s.t_lookup_s[i], s.t_end_s[i]) for i, r in enumerate(s.refs)}
    assert t[("a/sub", 0)][0] == pytest.approx(t[("a", 0)][1] + 0.25)  # spawned, takes no slot
    assert t[("a", 1)][0] == pytest.approx(max(t[("a", 0)][1], t[("a/sub", 0)][1]) + 2.0)
    assert s.refs[-1] == ("b", 0)  # the single slot is still busy with task a


@pytest.mark.parametrize("pool", [1, 2, 3])
def test_no_call_before_its_dependencies_end_plus_gap(pool):
    trace = with_sub_agent()
    s = closed_loop_schedule(trace, pool, service=SVC)
    ends = dict(zip(s.refs, s.t_end_s, strict=True))
    looks = dict(zip(s.refs, s.t_lookup_s, strict=True))
    for calls in trace.tasks.values():
        for prev, c in zip(calls, calls[1:], strict=False):
            assert looks[c.ref] >= ends[prev.ref] + c.gap_s - 1e-9
        for c in calls:
            for dep in c.after:
                assert looks[c.ref] >= ends[dep] + c.gap_s - 1e-9
    assert sorted(s.refs) == sorted(c.ref for c in trace.calls)
    assert closed_loop_order(trace, pool, service=SVC) == s.refs


def test_open_loop_traces_arrive_at_their_times():
    base = two_tasks_with_gaps()
    calls = [
        dataclasses.replace(c, at_s=t) for c, t in zip(base.calls, [3.0, 9.0, 1.0], strict=True)
    ]
    trace = Trace(base.header, calls)
    s = closed_loop_schedule(trace, 1, service=SVC)
    assert s.refs == [("b", 0), ("a", 0), ("a", 1)]
    assert s.t_lookup_s.tolist() == [0.0, 2.0, 8.0]  # counted from the first arrival
    assert trace_schedule(trace).refs == s.refs


def test_open_loop_arrivals_meet_the_same_server_queue_jitter_and_batch():
    """An open-loop trace's calls arrive at their times, and the server they reach is the closed
    loop's: with a queue a call waits for device space and for the prefills before it, jitter
    stretches service. Both were dropped, and decodes priced alone (the prediction still said
    `engine_queue: true`)."""
    base = two_tasks_with_gaps()
    calls = [
        dataclasses.replace(c, at_s=t) for c, t in zip(base.calls, [0.0, 9.0, 0.0], strict=True)
    ]
    trace = Trace(base.header, calls)
    plain = closed_loop_schedule(trace, 1, service=SVC)
    first, second = plain.refs[:2]  # a/0 and b/0 arrive together
    assert plain.t_lookup_s[:2].tolist() == [0.0, 0.0]
    queued = closed_loop_schedule(trace, 1, service=SVC, queue=EngineQueue(device_tokens=250))
    by_ref = dict(
        zip(queued.refs, zip(queued.t_lookup_s, queued.t_end_s, strict=True), strict=True)
    )
    assert by_ref[second][0] >= by_ref[first][1]  # no room beside the first: admitted at its end
    jittered = closed_loop_schedule(trace, 1, service=SVC, jitter=0.5, rng=np.random.default_rng(1))
    assert not np.array_equal(jittered.t_end_s, plain.t_end_s)


def test_service_model_from_presets_is_a_roofline():
    svc = ServiceModel.from_presets(MODELS["llama-3-8b"], HARDWARE["h100"], tp=1, efficiency=0.5)
    # 989.5 TFLOP/s * 0.5 / (2 * 8e9 FLOPs per token); 3.35 TB/s * 0.5 / 16 GB of weights
    assert svc.prefill_tokens_per_s == pytest.approx(989.5e12 * 0.5 / 16e9)
    assert svc.decode_tokens_per_s == pytest.approx(3350e9 * 0.5 / 16e9)
    with pytest.raises(ConfigError):
        ServiceModel(prefill_tokens_per_s=0)


def _rows():
    return [  # written in completion order, as the driver streams them
        {
            "task": "b",
            "call": 0,
            "t_ready": 0.0,
            "t_send": 0.5,
            "t_first_token": 0.7,
            "t_end": 3.0,
            "status": "ok",
        },
        {
            "task": "a",
            "call": 0,
            "t_ready": 0.0,
            "t_send": 0.1,
            "t_first_token": None,
            "t_end": 1.0,
            "status": "ok",
        },
        {
            "task": "a",
            "call": 1,
            "t_ready": 1.0,
            "t_send": 1.0,
            "t_first_token": 1.5,
            "t_end": 2.0,
            "status": "error",
        },
        {
            "task": "c",
            "call": 0,
            "t_ready": 0.0,
            "t_send": None,
            "t_first_token": None,
            "t_end": None,
            "status": "error",
        },
    ]


def test_recorded_run_schedule_from_jsonl_and_parquet(tmp_path):
    from replay.driver.records import write_parquet

    j = tmp_path / "j"
    j.mkdir()
    (j / "calls.jsonl").write_bytes(
        b"".join(orjson.dumps(r) + b"\n" for r in _rows()) + b'{"task": "x"'
    )
    p = tmp_path / "p"
    p.mkdir()
    write_parquet(_rows(), p / "calls.parquet")
    for d in (j, p):
        s = read_run_schedule(d)
        assert s.refs == [("a", 0), ("b", 0)]  # by send time; failed and unsent calls left out
        assert s.t_prefill_s.tolist() == [1.0, 0.7]  # no first token: the prefill ends at t_end
        assert read_run_order(d, include_errors=True) == [("a", 0), ("b", 0), ("a", 1)]
    assert parse_order(f"run:{p}").refs == [("a", 0), ("b", 0)]
    with pytest.raises(ConfigError, match="no calls.parquet"):
        read_run_schedule(tmp_path)


class ServiceTimeTransport:
    """A server that takes exactly `ServiceModel` time per call: the closed loop's oracle is then
    the driver's own agent pool, run in virtual time."""

    name = "service-time"

    def __init__(self, trace: Trace, service: ServiceModel):
        self.trace, self.service = trace, service

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def complete(self, request):
        import asyncio

        from replay.model.order import _new_tokens
        from replay.protocol import CompletionResult

        loop = asyncio.get_running_loop()
        call = self.trace.call((request.task, request.call))
        await asyncio.sleep(self.service.prefill_s(_new_tokens(self.trace, call)))
        t_first = loop.time()
        await asyncio.sleep(self.service.decode_s(call.output_len))
        return CompletionResult(
            t_first_token=t_first,
            t_end=loop.time(),
            prompt_tokens=len(request.prompt),
            completion_tokens=request.max_tokens,
        )


@pytest.mark.parametrize("pool", [1, 3])
def test_closed_loop_schedule_equals_the_driver_pool_in_virtual_time(pool, tmp_path):
    from replay.driver.options import RunOptions
    from replay.driver.run import run_replay
    from replay.trace.synth import synth

    # claude-code: shared heads, gaps, and sub-agents that spawn and join
    trace = synth("claude-code", tasks=6, seed=8, scale=0.02, max_calls_per_task=8)
    assert any(c.parent for c in trace.calls)
    svc = ServiceModel(prefill_tokens_per_s=5_000.0, decode_tokens_per_s=25.0)
    summary = run_replay(
        trace,
        lambda: ServiceTimeTransport(trace, svc),
        RunOptions(pool=pool),
        tmp_path,
        virtual=True,
    )
    assert summary["status"] == "ok"
    recorded = read_run_schedule(tmp_path)
    ours = closed_loop_schedule(trace, pool, service=svc)
    assert sorted(recorded.refs) == sorted(ours.refs)
    rec = {r: i for i, r in enumerate(recorded.refs)}
    at = np.array([rec[r] for r in ours.refs])
    np.testing.assert_allclose(ours.t_lookup_s, recorded.t_lookup_s[at], atol=1e-6)
    np.testing.assert_allclose(ours.t_prefill_s, recorded.t_prefill_s[at], atol=1e-6)
    np.testing.assert_allclose(ours.t_end_s, recorded.t_end_s[at], atol=1e-6)


def test_a_slot_takes_its_next_task_when_it_frees_after_the_tail_gap():
    # r0 ends at 0.25 + 3 s tail = 3.25; r1 ends at 1.0: r2 goes to r1's slot at 1.0, not r0's
    trace = make_trace(
        {"r0": [([1] * 10, [2] * 2)], "r1": [([3] * 10, [4] * 10)], "r2": [([5] * 10, [6])]}
    )
    trace = Trace(
        trace.header, [dataclasses.replace(trace.calls[0], tail_gap_s=3.0), *trace.calls[1:]]
    )
    s = closed_loop_schedule(trace, 2, service=ServiceModel(1e3, 10.0))
    assert dict(zip(s.refs, s.t_lookup_s.tolist(), strict=True))[("r2", 0)] == pytest.approx(1.01)
