"""When the agent pool sends: absolute-deadline sleeps, the `--max-rps` cap, the window of bodies
built ahead of their send, and the probe of the client loop's lag.

Time is only ever read from `loop.time()`, and every wait is for an absolute deadline, so the same
code paces a real server on a normal loop and the simulator on `replay.clock.VirtualTimeLoop`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from replay.clock import VirtualTimeLoop
from replay.protocol import CompletionRequest

__all__ = ["sleep_until", "make_rate_limiter", "AheadWindow", "probe_lag"]

_LAG_PERIOD_S = 0.05  # event-loop lag probe interval (real loops only)
# Bodies built ahead of their deadline (transports with `prepare`, real loops only): a closed-loop
# call's body is built as soon as the call is scheduled (its gap then runs), an open-loop call's
# `_AHEAD_S` before its arrival, while the bodies held stay under `_AHEAD_TOKENS` prompt tokens
# (~10 bytes a token: the ids and their JSON); past that a body is built at its send, as before.
_AHEAD_S = 0.25
_AHEAD_TOKENS = 8_000_000


async def sleep_until(loop: asyncio.AbstractEventLoop, t: float) -> None:
    """Wait for an absolute loop time (no drift from re-computing relative delays)."""
    if t <= loop.time():
        return
    fut = loop.create_future()
    handle = loop.call_at(t, _wake, fut)
    try:
        await fut
    finally:
        handle.cancel()


def _wake(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


class _RateLimiter:
    """At most `rate` sends a second, spaced by absolute deadlines on the loop clock.

    Used on the virtual-time loop, where asyncio-throttle cannot work: it reads time.monotonic()
    and polls with real sleeps. Real runs use asyncio-throttle (see `make_rate_limiter`).
    """

    def __init__(self, rate: float) -> None:
        self._interval = 1.0 / rate
        self._next = float("-inf")

    async def wait(self, loop: asyncio.AbstractEventLoop) -> None:
        now = loop.time()
        t = max(now, self._next)
        self._next = t + self._interval
        if t > now:
            await sleep_until(loop, t)


class _ThrottleLimiter:
    """`--max-rps` on a wall-clock loop through asyncio-throttle: one send per 1/rate window, so
    sends are spaced as `_RateLimiter` spaces them; its poll interval is kept to a tenth of the
    spacing (at most 1 ms) so the cap itself adds little send drift."""

    def __init__(self, rate: float) -> None:
        from asyncio_throttle import Throttler

        interval = 1.0 / rate
        self._throttler = Throttler(
            rate_limit=1, period=interval, retry_interval=min(1e-3, interval / 10)
        )

    async def wait(self, loop: asyncio.AbstractEventLoop) -> None:
        await self._throttler.acquire()


def make_rate_limiter(
    rate: float, loop: asyncio.AbstractEventLoop
) -> _RateLimiter | _ThrottleLimiter:
    """The `--max-rps` cap for `loop`: its own deadlines on virtual time, asyncio-throttle else."""
    return _RateLimiter(rate) if isinstance(loop, VirtualTimeLoop) else _ThrottleLimiter(rate)


class AheadWindow:
    """Request bodies built before their deadline through the transport's `prepare`, held while
    their prompt tokens fit under `_AHEAD_TOKENS`: the send at the deadline then only writes
    bytes, and a long run never holds more than a bounded amount of built bodies."""

    def __init__(self, prepare: Callable[[CompletionRequest], None]) -> None:
        self._prepare = prepare
        self.tokens = 0  # prompt tokens of the bodies built and not yet sent

    @property
    def lead_s(self) -> float:
        """How long before an open-loop arrival its body is built."""
        return _AHEAD_S

    def build(self, req: CompletionRequest) -> bool:
        """Build `req`'s body now if the window has room; True if built."""
        n = len(req.prompt)
        if self.tokens + n > _AHEAD_TOKENS:
            return False
        self._prepare(req)
        self.tokens += n
        return True

    async def until(
        self, loop: asyncio.AbstractEventLoop, req: CompletionRequest, t_ready: float, built: bool
    ) -> None:
        """Wait for `req`'s deadline, its body (if `built`) held in the window until then."""
        try:
            await sleep_until(loop, t_ready)
        finally:
            if built:
                self.tokens -= len(req.prompt)


async def probe_lag(loop: asyncio.AbstractEventLoop, lags_s: list[float]) -> None:
    """Append to `lags_s` how late each periodic wake-up came, until cancelled: a busy client loop
    delays sends, and this says by how much."""
    target = loop.time() + _LAG_PERIOD_S
    with contextlib.suppress(asyncio.CancelledError):
        while True:
            await sleep_until(loop, target)
            now = loop.time()
            lags_s.append(now - target)
            target = now + _LAG_PERIOD_S
