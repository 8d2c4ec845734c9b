"""Clocks: wall time for real runs, and an asyncio event loop whose time is virtual for simulated runs.

The driver's agent pool is ordinary asyncio code that reads time from `loop.time()` and waits with
`asyncio.sleep`/timeouts. Run on a normal loop it paces a real server; run on `VirtualTimeLoop` the
same code drives the in-process simulator, and time jumps straight to the next scheduled event, so a
three-hour replay takes seconds and is deterministic (no real I/O may happen on that loop).
"""

from __future__ import annotations

import asyncio
import math
import selectors
from collections.abc import Callable, Coroutine
from typing import Protocol, TypeVar

__all__ = ["Clock", "LoopClock", "VirtualTimeLoop", "run_virtual", "run_real"]

T = TypeVar("T")


class Clock(Protocol):
    """Seconds on a monotonic scale, and a way to wait. Pure code receives one of these."""

    def now(self) -> float: ...

    async def sleep(self, dt_s: float) -> None: ...

    async def sleep_until(self, t_s: float) -> None: ...


class LoopClock:
    """Time of the running asyncio loop: wall-monotonic on a normal loop, virtual on VirtualTimeLoop."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None):
        self._loop = loop

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop or asyncio.get_running_loop()

    def now(self) -> float:
        return self.loop.time()

    async def sleep(self, dt_s: float) -> None:
        await asyncio.sleep(max(0.0, dt_s))

    async def sleep_until(self, t_s: float) -> None:
        dt = t_s - self.loop.time()
        if dt > 0:
            await asyncio.sleep(dt)


class _VirtualSelector(selectors.BaseSelector):
    """A selector that never has I/O: waiting `timeout` seconds just advances the loop's virtual time."""

    def __init__(self) -> None:
        self._map: dict[object, selectors.SelectorKey] = {}
        self.loop: VirtualTimeLoop | None = None

    def register(self, fileobj, events, data=None):  # the loop's self-pipe registers here
        key = selectors.SelectorKey(fileobj, id(fileobj), events, data)
        self._map[fileobj] = key
        return key

    def unregister(self, fileobj):
        return self._map.pop(fileobj)

    def select(self, timeout=None):
        if timeout is None:
            raise RuntimeError(
                "virtual-time loop would wait forever: nothing is scheduled and nothing is ready "
                "(a coroutine awaits something no simulated event will ever complete)"
            )
        if timeout > 0 and self.loop is not None:
            self.loop._advance()
        return []

    def get_map(self):
        return self._map

    def close(self) -> None:
        self._map.clear()


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """Event loop whose `time()` starts at 0 and moves only when every task is waiting on a timer.

    Time jumps to the next timer's deadline exactly, at any magnitude. asyncio's own loop adds a
    step to the clock (`now + delay`, at most a day per wait) and runs the timers due before
    `now + clock resolution`; past 2**24 s a nanosecond resolution no longer moves a float, so a
    timer due now would never run and the loop would spin. Here the resolution is at least one
    float step of the current time, and the clock is set to the deadline rather than summed.
    """

    def __init__(self) -> None:
        selector = _VirtualSelector()
        super().__init__(selector)
        selector.loop = self
        self._virtual_now = 0.0

    def time(self) -> float:
        return self._virtual_now

    @property  # type: ignore[override]
    def _clock_resolution(self) -> float:
        # timers due by `time() + this` run now: never less than one float step of the time
        return max(1e-9, math.ulp(self._virtual_now))

    @_clock_resolution.setter
    def _clock_resolution(self, _: float) -> None:
        pass  # asyncio's __init__ sets the monotonic clock's resolution; the getter decides

    def advance_if_alone(self, delay: float) -> bool:
        """Move the clock `delay` ahead now and return True if a callback scheduled with
        `call_later(delay, ...)` would run next and alone in its loop turn: nothing is ready and
        no timer is due before that time plus the clock resolution. The caller then runs that
        callback itself, at the same time with the same float (`time() + delay`), in the same
        order, without a timer and a loop turn (the simulator's engine: ~17,000 waits a run)."""
        if self._ready:  # type: ignore[attr-defined]
            return False
        t = self._virtual_now + delay
        scheduled = self._scheduled  # type: ignore[attr-defined]
        if scheduled and scheduled[0].when() < t + max(1e-9, math.ulp(t)):
            return False
        self._virtual_now = t
        return True

    def _advance(self) -> None:
        """Nothing is ready and every task waits: jump to the earliest timer's deadline."""
        scheduled = self._scheduled  # type: ignore[attr-defined]
        if scheduled:
            self._virtual_now = max(self._virtual_now, scheduled[0].when())


def run_virtual(main: Callable[[], Coroutine[object, object, T]]) -> T:
    """Run `main()` to completion on a fresh VirtualTimeLoop and close it."""
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def run_real(main: Callable[[], Coroutine[object, object, T]]) -> T:
    """Run `main()` on a normal asyncio loop (wall clock)."""
    return asyncio.run(main())
