"""Drives a `SimEngine` on a clock: sleeps each planned step, wakes early for arrivals.

`LoopSimClock` uses the running loop's time (virtual under `VirtualTimeLoop`, so simulated time
jumps); `ScaledSimClock` is the HTTP server's: `time_scale` wall seconds per simulated second, or
as fast as possible at 0. A decode-only stretch is one sleep, cut at the end of the step in progress
when a request arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import numpy as np

from replay.sim.engine import Seq, SimEngine

__all__ = ["LoopSimClock", "ScaledSimClock", "EngineRunner", "settle"]


class _Waker:
    """A one-shot future the runner awaits; `wake()` resolves it early."""

    def __init__(self) -> None:
        self.fut: asyncio.Future | None = None

    def wake(self) -> None:
        f = self.fut
        if f is not None and not f.done():
            f.set_result(True)

    async def wait(self, dt_s: float | None, wakeable: bool) -> bool:
        """Wait `dt_s` (None: until woken); True if `wake()` ended the wait early."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        if wakeable:
            self.fut = fut
        handle = None
        if dt_s is not None:
            handle = loop.call_later(max(0.0, dt_s), _resolve, fut)
        try:
            return bool(await fut)
        finally:
            self.fut = None
            if handle is not None:
                handle.cancel()


def _resolve(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(False)


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

    async def wait(self, dt_s: float | None, waker: _Waker, wakeable: bool) -> bool:
        return await waker.wait(dt_s, wakeable)


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

    async def wait(self, dt_s: float | None, waker: _Waker, wakeable: bool) -> bool:
        if self.scale == 0 and dt_s is not None:
            self._sim += max(0.0, dt_s)
            await asyncio.sleep(0)  # let handlers run; no wall time passes
            return False
        self._rebase()
        woken = await waker.wait(None if dt_s is None else dt_s * self.scale, wakeable)
        self._rebase()
        return woken


class EngineRunner:
    """Runs the engine loop as an asyncio task; `submit` hands it a request."""

    def __init__(self, engine: SimEngine, clock: LoopSimClock | ScaledSimClock):
        self.engine = engine
        self.clock = clock
        self._waker = _Waker()
        self._task: asyncio.Task | None = None
        self.steps = 0
        self.error: BaseException | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def submit(self, seq: Seq) -> None:
        if self.error is not None:
            raise RuntimeError(f"simulator engine failed: {self.error!r}")
        self.engine.submit(seq, self.clock.now())
        self._waker.wake()

    async def _run(self) -> None:
        try:
            await self._loop()
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # a simulator bug: fail every request instead of hanging them
            self.error = e
            for s in list(self.engine.running) + list(self.engine.waiting):
                if s.on_fail is not None:
                    s.on_fail(s, e)
            raise

    async def _loop(self) -> None:
        eng, clock, waker = self.engine, self.clock, self._waker
        while True:
            now = clock.now()
            plan = eng.schedule(now)
            if plan is None:
                t = eng.next_timer()
                await clock.wait(None if t is None else t - now, waker, True)
                continue
            factor = eng.service_factor()
            cum = plan.cum if factor == 1.0 else plan.cum * factor
            if plan.interruptible and len(cum) > 1:
                k = len(cum)
                if await clock.wait(float(cum[-1]), waker, True):  # an arrival: cut the stretch
                    elapsed = clock.now() - plan.start
                    k = int(np.searchsorted(cum, elapsed, side="right"))
                    if k < len(cum):  # finish the step in progress
                        await clock.wait(float(cum[k]) - elapsed, waker, False)
                        k += 1
            else:
                await clock.wait(float(cum[-1]), waker, False)
                k = len(cum)
            self.steps += k
            eng.commit(plan, k, plan.start + float(cum[k - 1]))
