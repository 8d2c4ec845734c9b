"""Request bodies are built while a call's gap runs, not at its deadline, within a bounded window.

Over real loopback: each transport is wrapped only to note when the pool asked it to build a body
and whether the body was ready when the call was sent; the server checks what arrived.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from replay.driver import pacing
from replay.driver.http import TRANSPORTS
from replay.driver.http_common import HttpOptions, ReadyBodies, body_parts
from replay.driver.options import RunOptions
from replay.driver.pool import replay
from replay.protocol import CompletionRequest
from replay.trace.model import Call, Trace, TraceHeader
from tests.servers import FaultServer


def _watched(name: str, url: str):
    """The named transport, noting each `prepare` and each send (loop time, body ready?)."""

    class Watched(TRANSPORTS[name]):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__(HttpOptions(url, model="m", limit=8, request_timeout_s=10))
            self.prepared: dict[tuple[str, int], float] = {}
            self.sent: dict[tuple[str, int], tuple[float, bool]] = {}
            self.most_held = 0

        def prepare(self, request: CompletionRequest) -> None:
            super().prepare(request)
            self.prepared[(request.task, request.call)] = asyncio.get_running_loop().time()
            self.most_held = max(self.most_held, len(self._bodies))

        def fire(self, request: CompletionRequest) -> bool:  # raw's: sent with its deadline
            key = (request.task, request.call)
            ready = request in self._bodies or key in self._staged
            self.sent[key] = (asyncio.get_running_loop().time(), ready)
            return super().fire(request)

        async def complete(self, request: CompletionRequest):
            now = asyncio.get_running_loop().time()
            key = (request.task, request.call)
            if key not in getattr(self, "_fired", {}):  # else `fire` noted its send
                # built ahead: still held, or already written but its last byte (raw's `stage`)
                ready = request in self._bodies or key in getattr(self, "_staged", {})
                self.sent[key] = (now, ready)
            return await super().complete(request)

    return Watched()


def _closed(tasks: int, calls: int, gap_s: float) -> Trace:
    rng = np.random.default_rng(5)
    out = []
    for t in range(tasks):
        ctx = 0
        for i in range(calls):
            new = rng.integers(0, 1000, 300 if i == 0 else 40, dtype=np.int32)
            out.append(Call(f"t{t}", i, gap_s, ctx, new, ctx + len(new), 3))
            ctx += len(new) + 3
    return Trace(TraceHeader(vocab_size=1000), out)


def _open(calls: int, after_s: float, span_s: float) -> Trace:
    """One call at once, then `calls` arriving from `after_s` on within `span_s`."""
    rng = np.random.default_rng(6)
    ats = [100.0] + [100.0 + after_s + span_s * i / calls for i in range(calls)]
    out = [
        Call(f"r{i:03d}", 0, 0.0, 0, rng.integers(0, 1000, 200, dtype=np.int32), 200, 2, at_s=at)
        for i, at in enumerate(ats)
    ]
    return Trace(TraceHeader(vocab_size=1000), out)


def _run(trace: Trace, name: str, srv: FaultServer, pool: int = 4):
    transport = _watched(name, srv.url)
    result = asyncio.run(replay(trace, transport, RunOptions(pool=pool, request_timeout_s=10)))
    assert result.status == "ok", result.reason
    # what arrived is exactly the trace's prompts, whether built ahead or at the send
    for seen in srv.seen:
        call = trace.tasks[seen.user][seen.index]
        assert seen.body["prompt"] == trace.prompt(call).tolist()
    return transport, result


@pytest.mark.parametrize("name", sorted(TRANSPORTS))
def test_closed_loop_body_is_built_ahead_and_the_send_takes_it(name, monkeypatch):
    trace = _closed(tasks=3, calls=3, gap_s=0.25)
    with FaultServer() as srv:
        transport, result = _run(trace, name, srv)
    assert len(result.rows) == 9 and len(srv.seen) == 9
    assert set(transport.prepared) == set(transport.sent)
    for key, (t_send, ready) in transport.sent.items():
        assert ready, key  # the send found its body built
        # built when the call was scheduled, a gap (0.25 s) before its send, not at it
        assert t_send - transport.prepared[key] >= 0.2, key
    assert len(transport._bodies) == 0  # nothing left held after the run


@pytest.mark.parametrize("name", ["raw", "aiohttp"])
def test_open_loop_window_ahead_is_bounded(name, monkeypatch):
    """Twenty arrivals inside one window, room for three prompts: only three bodies are held at
    once; the rest are built at their send, and every call still arrives exactly."""
    monkeypatch.setattr(pacing, "_AHEAD_S", 0.3)
    monkeypatch.setattr(pacing, "_AHEAD_TOKENS", 3 * 200)
    trace = _open(calls=20, after_s=0.35, span_s=0.05)
    with FaultServer() as srv:
        transport, result = _run(trace, name, srv)
    assert len(result.rows) == 21
    assert all(r["drift_s"] >= 0 for r in result.rows)  # built ahead or not, none sent early
    assert transport.most_held <= 3
    later = {k: v for k, v in transport.sent.items() if k[0] != "r000"}
    built_ahead = [k for k, (_, ready) in later.items() if ready]
    assert len(built_ahead) == 3  # the window filled once; the others were built at their send
    for key in built_ahead:
        assert later[key][0] - transport.prepared[key] >= 0.2


def test_ready_bodies_hand_over_the_body_built_at_prepare():
    built: list[int] = []

    def build(req: CompletionRequest) -> bytes:
        built.append(req.call)
        return b"".join(body_parts("m", req))

    bodies = ReadyBodies(build)
    a = CompletionRequest(task="a", call=0, prompt=np.arange(5, dtype=np.int32), max_tokens=2)
    b = CompletionRequest(task="a", call=1, prompt=np.arange(6, dtype=np.int32), max_tokens=2)
    bodies.prepare(a)
    assert a in bodies and b not in bodies and len(bodies) == 1
    assert bodies.take(a) == b"".join(body_parts("m", a))
    assert bodies.take(b) == b"".join(body_parts("m", b))  # not prepared: built at the take
    assert built == [0, 1] and len(bodies) == 0


def test_a_build_waits_for_the_sends_due_during_it():
    """Builds of big bodies run between sends, not over them: a burst's bodies, built a lead
    before their arrival, would be built just as the previous burst is due (2 ms before it),
    each taking ~10 ms; they wait until that burst has been sent (the build would have held
    back every send of the burst)."""
    lead_s = pacing._AHEAD_S
    rng = np.random.default_rng(7)
    t1 = 100.5  # the first arrival (a small call) is at 100.0, when the run starts
    ats = [t1] * 4 + [t1 + lead_s - 0.002] * 4
    first = Call("a", 0, 0.0, 0, np.arange(10, dtype=np.int32), 10, 2, at_s=100.0)
    trace = Trace(
        TraceHeader(vocab_size=1000),
        [first] + [
            Call(f"b{i}", 0, 0.0, 0, rng.integers(0, 1000, 20_000, dtype=np.int32), 20_000,
                 2, at_s=at)
            for i, at in enumerate(ats)
        ],
    )  # fmt: skip
    with FaultServer() as srv:
        transport = _watched("raw", srv.url)
        inner = transport.prepare

        def slow_prepare(request: CompletionRequest) -> None:
            time.sleep(0.01)  # a build as long as a large imported prompt's on a busy machine
            inner(request)

        transport.prepare = slow_prepare  # type: ignore[method-assign]
        result = asyncio.run(replay(trace, transport, RunOptions(pool=8, request_timeout_s=10)))
    assert result.status == "ok", result.reason
    last_first_send = max(transport.sent[(f"b{i}", 0)][0] for i in range(4))
    for t in (f"b{i}" for i in range(4, 8)):
        assert transport.prepared[(t, 0)] >= last_first_send, t
        assert transport.sent[(t, 0)][1], t  # still built ahead of its own send


def test_ahead_window_forgets_each_deadline_once_it_is_sent():
    """The deadlines of waiting calls (equal ones included) leave the window's heap when they
    are sent or cancelled, so that a long run holds only those still waiting."""

    async def main() -> pacing.AheadWindow:
        loop = asyncio.get_running_loop()
        window = pacing.AheadWindow(lambda req: None)
        t = loop.time() + 0.01
        later = t + 60.0  # never reached: cancelled below
        reqs = [
            CompletionRequest(task=f"t{i}", call=0, prompt=np.arange(3, dtype=np.int32),
                              max_tokens=1)
            for i in range(4)
        ]  # fmt: skip
        tasks = [
            asyncio.ensure_future(window.until(loop, r, later if i == 3 else t, False))
            for i, r in enumerate(reqs)
        ]
        await asyncio.sleep(0)
        assert sorted(window._due) == [t, t, t, later]
        await asyncio.gather(*tasks[:3])
        assert window._due == [later]
        tasks[3].cancel()
        with pytest.raises(asyncio.CancelledError):
            await tasks[3]
        return window

    window = asyncio.run(main())
    assert window._due == [] and window._sent == {}


@pytest.mark.parametrize("name", ["raw", "aiohttp"])
def test_the_first_open_loop_arrivals_are_built_before_the_clock_starts(name):
    """The arrivals within the build lead of the start are built before t0 (built after it they
    would be built past their deadlines, one after another), in arrival order; the later ones
    are built during the run, as before."""
    trace = _open(calls=6, after_s=0.05, span_s=0.5)  # at 0, 0.05, 0.13, ... 0.47 s
    with FaultServer() as srv:
        transport = _watched(name, srv.url)
        before_t0: list[tuple[str, int]] = []
        opts = RunOptions(pool=4, request_timeout_s=10)
        on_ready = lambda: before_t0.extend(transport.prepared)  # noqa: E731
        result = asyncio.run(replay(trace, transport, opts, on_ready=on_ready))
    assert result.status == "ok", result.reason
    t_first = min(c.at_s or 0.0 for c in trace.calls)
    first = [(c.task, c.index) for c in trace.calls if (c.at_s or 0.0) - t_first < pacing._AHEAD_S]
    assert len(first) == 4 and before_t0 == first
    assert len(transport.prepared) == len(trace)  # the rest built too, during the run
    for key in first:
        assert transport.sent[key][1], key  # sent with the body built before the clock
