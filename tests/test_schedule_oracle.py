"""The models' closed loops against the driver's own pool, on random traces.

Both models play the rules of `replay.trace.schedule` against a service model; the pool plays
them against a transport. Run the real pool in virtual time against a transport that takes the
model's service times and every call must be sent and end when the model says: sub-agents, joins,
tail gaps, gap scaling and open loop included.
"""

from __future__ import annotations

import asyncio

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay.clock import run_virtual
from replay.driver.options import RunOptions
from replay.driver.pool import replay
from replay.model.order import ServiceModel, closed_loop_schedule
from replay.model.wholeprompt import WholePromptCache, WholePromptConfig
from replay.model.wholeprompt_loop import CpuService, simulate_closed_loop
from replay.protocol import CompletionResult
from replay.trace.model import Trace
from tests.servers import make_trace
from tests.test_model_order import ServiceTimeTransport

SVC = ServiceModel(prefill_tokens_per_s=400.0, decode_tokens_per_s=20.0)
GAPS = st.sampled_from([0.0, 0.25, 0.5, 1.5])  # ties on purpose: equal times must agree too


@st.composite
def trace_specs(draw, open_loop: bool = False, gaps=GAPS):
    """Root tasks, sub-agents spawned by any call (of roots or of other sub-agents), joins of a
    sub-agent's last call by a later call of its parent, joins of earlier root tasks, tail gaps."""

    def calls(n: int) -> list[dict]:
        return [
            {"gap": draw(gaps), "new": draw(st.integers(1, 30)), "out": draw(st.integers(1, 12))}
            for _ in range(n)
        ]

    tasks: dict[str, list[dict]] = {}
    for r in range(draw(st.integers(1, 4))):
        tasks[f"r{r}"] = calls(draw(st.integers(1, 4)))
        if draw(st.booleans()):
            tasks[f"r{r}"][-1]["tail"] = draw(gaps)
        if r and draw(st.booleans()):  # wait on an earlier root task: slow, never stuck
            earlier = f"r{draw(st.integers(0, r - 1))}"
            ref = (earlier, len(tasks[earlier]) - 1)
            tasks[f"r{r}"][-1].setdefault("after", []).append(ref)
    for s in range(draw(st.integers(0, 3))):
        parent = draw(st.sampled_from(sorted(tasks)))
        pcalls = tasks[parent]
        at = draw(st.integers(0, len(pcalls) - 1))
        name = f"{parent}.s{s}"
        sub = calls(draw(st.integers(1, 3)))
        sub[0]["parent"] = (parent, at)
        tasks[name] = sub
        if at + 1 < len(pcalls) and draw(st.booleans()):  # the parent joins it later
            joiner = pcalls[draw(st.integers(at + 1, len(pcalls) - 1))]
            joiner.setdefault("after", []).append((name, len(sub) - 1))
    if open_loop:
        for specs in tasks.values():
            t = draw(st.floats(0, 5))
            for spec in specs:
                t += draw(st.floats(0, 3))
                spec["at"] = t + 100.0  # rebased to the first arrival
                spec.pop("after", None)  # each call is sent at its time: the reader refuses
                spec.pop("parent", None)  # a dependency in an open-loop trace
    return tasks


def without_ties(tasks: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """Add 10 ms * (1 - 2**-k) to the k-th gap, tail gap or arrival: no two ways through the
    trace then add up to the same time (at a tie the order of two events is up to the event
    loop, and the cache would see it), and arrivals within a task stay in order."""
    k = 0
    for specs in tasks.values():
        for spec in specs:
            for key in ("gap", "tail", "at"):
                if key in spec:
                    k += 1
                    spec[key] += 0.01 * (1 - 2.0**-k)
    return tasks


def pool_run(trace: Trace, transport, pool: int, gap_scale: float):
    result = run_virtual(
        lambda: replay(trace, transport, RunOptions(pool=pool, gap_scale=gap_scale))
    )
    assert result.status == "ok" and len(result.rows) == len(trace)
    return {(r["task"], r["call"]): r for r in result.rows}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spec=trace_specs(),
    pool=st.integers(1, 4),
    gap_scale=st.sampled_from([0.5, 1.0, 3.0]),
    open_loop=st.booleans(),
    data=st.data(),
)
def test_closed_loop_schedule_sends_and_ends_every_call_when_the_pool_does(
    spec, pool, gap_scale, open_loop, data
):
    if open_loop:
        spec = data.draw(trace_specs(open_loop=True))
    trace = make_trace(spec)
    rows = pool_run(trace, ServiceTimeTransport(trace, SVC), pool, gap_scale)
    model = closed_loop_schedule(trace, pool, service=SVC, gap_scale=gap_scale)
    assert sorted(model.refs) == sorted(rows)
    for i, ref in enumerate(model.refs):
        assert abs(rows[ref]["t_send"] - model.t_lookup_s[i]) < 1e-9, ref
        assert abs(rows[ref]["t_first_token"] - model.t_prefill_s[i]) < 1e-9, ref
        assert abs(rows[ref]["t_end"] - model.t_end_s[i]) < 1e-9, ref
    # equal times per call are the same send order, but for ties, whose order neither promises


class WholePromptTransport:
    """A server with the whole-prompt cache and `CpuService` times, given slots enough for every
    call in flight: the whole-prompt model with the pool in place of its own loop."""

    name = "whole-prompt"

    def __init__(self, config: WholePromptConfig, service: CpuService):
        self.cache, self.service = WholePromptCache(config), service
        self.admitted: list[tuple] = []

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def complete(self, request) -> CompletionResult:
        loop = asyncio.get_running_loop()
        prompt = np.asarray(request.prompt)
        a = self.cache.admit(prompt)
        self.admitted.append((request.task, request.call, a.slot, a.cached_tokens))
        await asyncio.sleep(self.service.call_s(a.computed_tokens, request.max_tokens))
        self.cache.release(a.slot, prompt, request.max_tokens, loop.time())
        return CompletionResult(
            t_first_token=None,
            t_end=loop.time(),
            prompt_tokens=len(prompt),
            completion_tokens=request.max_tokens,
        )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spec=trace_specs(gaps=st.floats(0.01, 2.0)),
    pool=st.integers(1, 4),
    mib=st.sampled_from([0, 1, 64]),
    open_loop=st.booleans(),
    data=st.data(),
)
def test_whole_prompt_loop_admits_calls_in_the_pools_order(spec, pool, mib, open_loop, data):
    if open_loop:
        spec = data.draw(trace_specs(open_loop=True, gaps=st.floats(0.01, 2.0)))
    trace = make_trace(without_ties(spec))
    config = WholePromptConfig(len(trace), mib, 1024.0)  # a slot for every call at once
    service = CpuService()
    transport = WholePromptTransport(config, service)
    pool_run(trace, transport, pool, 1.0)
    model = simulate_closed_loop(trace, pool, config, service=service)
    assert [(*o.ref, o.slot, o.cached_tokens) for o in model.calls] == transport.admitted
