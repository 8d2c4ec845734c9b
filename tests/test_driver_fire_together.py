"""The built calls due at one deadline are sent back to back from one loop callback (a staged
call's last byte, another's whole request), over real loopback; and the window's grouping on its
own, with recording callables."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from replay.driver import pacing
from replay.driver.options import RunOptions
from replay.driver.pool import RunControl, replay
from replay.protocol import CompletionRequest
from tests.test_driver_last_byte import (  # noqa: F401 - `lead` is a fixture
    LastByteServer,
    Watched,
    _open_trace,
    lead,
)


class Noted(Watched):
    """`Watched`, noting for each `fire` whether it ran inside a task (a task's own send) or
    from a loop callback (the deadline's group), and how many groups the window fired."""

    def __init__(self, url: str, prewarm: int = 8) -> None:
        super().__init__(url, prewarm)
        self.fired_in_task: list[bool] = []
        self.on_fire = None  # called after each fire, for the stop test
        self.events: list[str] = []  # "fire <task>" per write, "arm <n>" per arming of n calls

    def fire(self, request: CompletionRequest) -> bool:
        fired = super().fire(request)
        if fired:
            self.events.append(f"fire {request.task}")
        self.fired_in_task.append(asyncio.current_task() is not None)
        if self.on_fire is not None:
            self.on_fire()
        return fired

    def arm_fired(self) -> None:
        if self._unarmed:
            self.events.append(f"arm {len(self._unarmed)}")
        super().arm_fired()


def _windows(monkeypatch) -> list[pacing.AheadWindow]:
    """The pool's ahead windows, as the pool makes them."""
    made: list[pacing.AheadWindow] = []
    real = pacing.ahead_window

    def keep(*args, **kwargs):
        w = real(*args, **kwargs)
        made.append(w)
        return w

    monkeypatch.setattr("replay.driver.pool.ahead_window", keep)
    return made


@pytest.mark.usefixtures("lead")
def test_a_burst_goes_out_from_one_callback_in_arrival_order(monkeypatch):
    windows = _windows(monkeypatch)
    # four long prompts (staged: last byte) and two short ones (whole), all due at 0.5 s
    trace = _open_trace([20_000, 300, 20_000, 20_000, 300, 20_000], [0.5] * 6)
    with LastByteServer() as srv:
        transport = Noted(srv.url)
        result = asyncio.run(replay(trace, transport, RunOptions(pool=8)))
    assert result.status == "ok", result.reason
    burst = [f"t{i}" for i in range(6)]
    assert transport.fired == burst  # the whole burst, in arrival order (the first call at t0
    # was due when built: its task sent it)
    assert transport.fired_in_task[-6:] == [False] * 6  # from the loop, not from their tasks
    # every write of the burst went out before any of its responses was armed, all at once
    assert transport.events == [f"fire {t}" for t in burst] + ["arm 6"]
    (window,) = windows
    assert (window.fired_groups, window.fired_calls) == (1, 6)
    rows = {r["task"]: r for r in result.rows}
    t_sends = [rows[t]["t_send"] for t in burst]
    assert t_sends == sorted(t_sends)  # each call's own send time, in the order sent
    assert all(rows[t]["drift_s"] >= 0 for t in burst)  # none before its deadline
    got = {a.user: a for a in srv.arrivals}
    assert len(srv.arrivals) == 7  # each request read once, the first call's included
    for c in trace.calls:  # the exact bodies
        assert got[c.task].prompt == trace.prompt(c).tolist()
    assert not transport._staged and not transport._fired


@pytest.mark.usefixtures("lead")
def test_a_stop_right_after_a_burst_went_out_records_every_call_of_it(monkeypatch):
    """The run stops in the callback after the burst's (before the calls' tasks run again): the
    calls are in flight, so they get the in-flight grace and their rows, not a cancellation
    that would drop them unrecorded; the run ends with nothing left open."""
    windows = _windows(monkeypatch)
    trace = _open_trace([20_000, 300, 20_000], [0.5] * 3)
    control = RunControl()
    with LastByteServer() as srv:
        transport = Noted(srv.url)

        def stop_after_burst() -> None:
            if transport.fired == ["t0"]:
                asyncio.get_running_loop().call_soon(control.stop)

        transport.on_fire = stop_after_burst
        opts = RunOptions(pool=4, interrupt_grace_s=5)
        result = asyncio.run(replay(trace, transport, opts, control=control))
    assert result.status == "interrupted"
    assert {r["task"]: r["status"] for r in result.rows} == dict.fromkeys(
        ["first", "t0", "t1", "t2"], "ok"
    )
    assert sorted(a.user for a in srv.arrivals) == ["first", "t0", "t1", "t2"]
    (window,) = windows
    assert window.fired_calls == 3
    assert not transport._staged and not transport._fired


def _req(task: str, n: int = 10) -> CompletionRequest:
    return CompletionRequest(task=task, call=0, prompt=np.zeros(n, dtype=np.int32), max_tokens=1)


def test_the_window_groups_by_deadline_and_skips_a_cancelled_call():
    """Three calls at one deadline and one at another: one timer each deadline; the call
    cancelled before its deadline is not fired but unstaged; a call `fire` refuses gets None
    (its task sends it). The `fired` hook runs once per group, after its last fire and before
    any of its tasks hears of its send."""
    fired: list[str] = []
    unstaged: list[str] = []
    resolved_at_hook: list[int] = []

    def fire(req: CompletionRequest, task) -> bool:
        fired.append(req.task)
        return req.task != "refused"

    def after_group() -> None:
        fired.append("|")
        resolved_at_hook.append(sum(t.done() for t in tasks.values()))

    async def main():
        loop = asyncio.get_running_loop()
        window = pacing.AheadWindow(lambda r: None, lambda r: False, lambda r: unstaged.append(r.task), fire, after_group)  # fmt: skip
        t = loop.time() + 0.05
        names = ["a", "cancelled", "refused", "later"]
        tasks.update(
            {
                n: loop.create_task(
                    window.until(loop, _req(n), t + (0.02 if n == "later" else 0), True)
                )
                for n in names
            }
        )
        await asyncio.sleep(0.01)
        tasks["cancelled"].cancel()
        got = await asyncio.gather(*tasks.values(), return_exceptions=True)
        return window, dict(zip(names, got, strict=True)), t

    tasks: dict[str, asyncio.Task] = {}
    window, got, t = asyncio.run(main())
    assert fired == ["a", "refused", "|", "later", "|"]
    assert resolved_at_hook == [1, 3]  # only the cancelled one, then all but `later`
    assert unstaged == ["cancelled"]
    assert isinstance(got["cancelled"], asyncio.CancelledError)
    assert got["refused"] is None
    assert t <= got["a"] < t + 0.05 and got["later"] >= t + 0.02
    assert (window.fired_groups, window.fired_calls) == (2, 2)
    assert not window._groups and not window._due
