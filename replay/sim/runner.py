"""Drives a `SimEngine` on a clock: waits out each planned step, wakes early for arrivals.

`LoopSimClock` uses the running loop's time (virtual under `VirtualTimeLoop`, so simulated time
jumps); `ScaledSimClock` is the HTTP server's: `time_scale` wall seconds per simulated second, or
as fast as possible at 0. A decode-only stretch is one wait, cut at the end of the step in progress
when a request arrives.

The runner is a chain of loop callbacks, not a task: each wait is one timer whose callback runs
the next part of the loop directly. A task needs a future per wait and a second loop turn to resume
after its timer fired; a paper-scale run waits ~35,000 times, and the callbacks take ~2.5% fewer
instructions. An arrival still resumes the runner one loop turn after it. A step's end now runs in
the turn its timer fires, so when a coroutine's sleep ends at the very same virtual instant the
step's end goes first (before, both resumed a turn later in timer order); no record changed.

On `VirtualTimeLoop` a wait that nothing could interrupt (nothing ready, no other timer due by
its end) ends in place: the loop's clock moves to its end (`advance_if_alone`) and the runner goes
on, in the same order and at the same float times as through a timer. About 60% of a paper-scale
run's ~17,500 waits end so; the rest (a finished request wakes its caller, an agent's call is due
first) still go through the loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import numpy as np

from replay.sim.engine import Plan, Seq, SimEngine

__all__ = ["LoopSimClock", "ScaledSimClock", "EngineRunner", "settle"]


def settle(fut: asyncio.Future, error: BaseException | None = None) -> None:
    """Resolve `fut` (or fail it with `error`) unless it is already done."""
    if fut.done():
        return
    if error is None:
        fut.set_result(None)
    else:
        fut.set_exception(error)


class LoopSimClock:
    """Simulated time is the loop's time."""

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    def begin_wait(self, dt_s: float | None, wakeable: bool) -> tuple[float | None, bool]:
        """Loop seconds to wait for `dt_s` simulated ones (None: until woken), and whether an
        arrival may cut the wait."""
        return (None if dt_s is None else max(0.0, dt_s)), wakeable

    def end_wait(self) -> None:
        pass

    def wall_s(self, dt_s: float) -> float:
        """Loop seconds that `dt_s` simulated ones take."""
        return max(0.0, dt_s)


class ScaledSimClock:
    """Simulated time for the HTTP server: `scale` wall s per simulated s; 0 runs steps at once."""

    def __init__(self, scale: float):
        self.scale = scale
        self._sim = 0.0
        self._wall = time.monotonic()

    def now(self) -> float:
        if self.scale == 0:
            return self._sim
        return self._sim + (time.monotonic() - self._wall) / self.scale

    def _rebase(self) -> None:
        if self.scale:
            self._sim, self._wall = self.now(), time.monotonic()

    def begin_wait(self, dt_s: float | None, wakeable: bool) -> tuple[float | None, bool]:
        if self.scale == 0 and dt_s is not None:
            self._sim += max(0.0, dt_s)
            return 0.0, False  # one loop turn for the handlers; no wall time passes
        self._rebase()
        return (None if dt_s is None else max(0.0, dt_s * self.scale)), wakeable

    def end_wait(self) -> None:
        self._rebase()

    def wall_s(self, dt_s: float) -> float:
        """Wall seconds that `dt_s` simulated ones take (0 as fast as possible)."""
        return max(0.0, dt_s * self.scale)


class EngineRunner:
    """Runs the engine loop on the running asyncio loop; `submit` hands it a request."""

    def __init__(self, engine: SimEngine, clock: LoopSimClock | ScaledSimClock):
        self.engine = engine
        self.clock = clock
        self.steps = 0
        self.error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.Handle | None = None  # the pending timer or resumption
        self._then: Callable[[bool], None] | None = None  # what runs when the wait ends
        self._wakeable = False
        self._plan: Plan | None = None
        self._cum = np.empty(0)
        self._k = 0
        self._steps_cap = 0  # steps of the plan in flight that will be committed (a cut lowers it)
        # the HTTP server's streams: called when a plan starts, is cut or the loop goes idle
        # (None in process, where no stream reads tokens before their request ends)
        self.on_change: Callable[[], None] | None = None
        # virtual time: a wait nothing else can interrupt ends at once (`advance_if_alone`)
        self._advance_if_alone: Callable[[float], bool] | None = None
        self._inline = False  # the wait just begun has ended: `_resume` runs its `then` next

    def start(self) -> None:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            if isinstance(self.clock, LoopSimClock):
                self._advance_if_alone = getattr(self._loop, "advance_if_alone", None)
            self._then = self._idle_done
            self._handle = self._loop.call_soon(self._resume, False)

    async def stop(self) -> None:
        """Stop the loop; re-raise the error that stopped it, if one did."""
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._then = self._loop = None
        self._wakeable = False
        if self.error is not None:
            raise self.error

    def submit(self, seq: Seq) -> None:
        if self.error is not None:
            raise RuntimeError(f"simulator engine failed: {self.error!r}")
        self.engine.submit(seq, self.clock.now())
        self._wake()

    def cancel(self, seq: Seq) -> None:
        """The request's client went away (`SimEngine.cancel`); the engine replans at once."""
        if self.error is None:
            self.engine.cancel(seq)
            self._wake()

    def tokens_ready(self, seq: Seq) -> int:
        """Output tokens `seq` has by now: those committed, plus one for each step of the plan
        in flight that holds it as a decode and has ended (a step's token exists at its end, as
        an engine streams it; a cut keeps every step that ended, so none is taken back)."""
        steps = self._steps_ended(seq)
        n = seq.generated + (0 if steps is None else min(steps[1], self._steps_cap))
        return min(n, seq.output_len)

    def next_step_wall_s(self, seq: Seq) -> float | None:
        """Wall seconds until the next step of the plan in flight that gives `seq` a token
        ends; None when no planned step does (it is waiting, prefilling or idle)."""
        steps = self._steps_ended(seq)
        if steps is None or steps[1] >= self._steps_cap:
            return None
        elapsed, k = steps
        return self.clock.wall_s(float(self._cum[k]) - elapsed)

    def _steps_ended(self, seq: Seq) -> tuple[float, int] | None:
        """(simulated seconds since the plan in flight began, how many of its steps have ended),
        or None when that plan does not decode `seq`."""
        plan = self._plan
        if plan is None or not any(s is seq for s in plan.decode):
            return None
        elapsed = self.clock.now() - plan.start
        return elapsed, int(np.searchsorted(self._cum, elapsed, side="right"))

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def _wake(self) -> None:
        if self._wakeable and self._loop is not None:  # cut the wait, one loop turn from now
            self._wakeable = False
            if self._handle is not None:
                self._handle.cancel()
            self._handle = self._loop.call_soon(self._resume, True)

    # -- the loop, one callback per wait ----------------------------------------------------------

    def _wait(self, dt_s: float | None, wakeable: bool, then: Callable[[bool], None]) -> None:
        """Call `then(woken)` after `dt_s` simulated seconds (None: only when woken), or earlier
        with woken=True when a submit arrives during a wakeable wait."""
        delay, self._wakeable = self.clock.begin_wait(dt_s, wakeable)
        self._then = then
        assert self._loop is not None
        if delay is None:
            self._handle = None
        elif self._advance_if_alone is not None and self._advance_if_alone(delay):
            self._inline = True  # nothing could arrive during the wait: it is over
        else:
            self._handle = self._loop.call_later(delay, self._resume, False)

    def _resume(self, woken: bool) -> None:
        """Run what the wait that ended was for, then each wait that ends at once after it (a
        loop here rather than a recursion: a run chains thousands)."""
        while True:
            then = self._then
            self._handle = self._then = None
            self._wakeable = self._inline = False
            if then is None:
                return
            try:
                self.clock.end_wait()
                then(woken)
            except BaseException as e:  # a simulator bug: fail every request, not hang them
                self.error = e
                for s in list(self.engine.running) + list(self.engine.waiting):
                    if s.on_fail is not None:
                        s.on_fail(s, e)
                if isinstance(e, KeyboardInterrupt | SystemExit):
                    raise
                return
            if not self._inline:
                return
            woken = False

    def _idle_done(self, woken: bool) -> None:
        self._next()

    def _next(self) -> None:
        eng, clock = self.engine, self.clock
        now = clock.now()
        plan = eng.schedule(now)
        if plan is None:
            t = eng.next_timer()
            if not eng.busy and isinstance(clock, ScaledSimClock) and clock.scale == 0:
                # as fast as possible: simulated time passes only with work, so an idle server
                # waits for the next request, not for its timers (jumping to them expired every
                # TTL pin the moment the server went idle)
                t = None
            self._wait(None if t is None else t - now, True, self._idle_done)
            self._changed()
            return
        factor = eng.service_factor()
        cum = plan.cum if factor == 1.0 else plan.cum * factor
        self._plan, self._cum, self._steps_cap = plan, cum, len(cum)
        if plan.interruptible and len(cum) > 1:
            self._wait(float(cum[-1]), True, self._stretch_done)
        else:
            self._k = len(cum)
            self._wait(float(cum[-1]), False, self._ran)
        self._changed()

    def _stretch_done(self, woken: bool) -> None:
        plan, cum = self._plan, self._cum
        assert plan is not None
        k = len(cum)
        if woken:  # an arrival: cut the stretch after the step in progress
            elapsed = self.clock.now() - plan.start
            k = int(np.searchsorted(cum, elapsed, side="right"))
            if k < len(cum):
                self._k = self._steps_cap = k + 1
                self._wait(float(cum[k]) - elapsed, False, self._ran)
                self._changed()
                return
        self._k = k
        self._ran(False)

    def _ran(self, woken: bool) -> None:
        plan, k = self._plan, self._k
        assert plan is not None
        self._plan = None
        self.steps += k
        self.engine.commit(plan, k, plan.start + float(self._cum[k - 1]))
        self._next()
