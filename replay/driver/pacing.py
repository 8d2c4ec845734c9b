"""When the agent pool sends: absolute-deadline sleeps, the `--max-rps` cap, the window of bodies
built ahead of their send, and the probe of the client loop's lag.

Time is only ever read from `loop.time()`, and every wait is for an absolute deadline, so the same
code paces a real server on a normal loop and the simulator on `replay.clock.VirtualTimeLoop`.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
from collections.abc import Callable

from replay.clock import VirtualTimeLoop
from replay.driver.options import RunOptions
from replay.protocol import CompletionRequest

__all__ = ["sleep_until", "make_rate_limiter", "AheadWindow", "ahead_window", "probe_lag"]

_LAG_PERIOD_S = 0.05  # event-loop lag probe interval (real loops only)
# Bodies built ahead of their deadline (transports with `prepare`, real loops only): a closed-loop
# call's body is built as soon as the call is scheduled (its gap then runs), an open-loop call's
# `_AHEAD_S` before its arrival, while the bodies held stay under `_AHEAD_TOKENS` prompt tokens
# (~10 bytes a token: the ids and their JSON); past that a body is built at its send, as before.
_AHEAD_S = 0.25
_AHEAD_TOKENS = 8_000_000
# A body is built in one loop turn: a send due during it waits for the whole build (an imported
# 14K-token prompt, hash blocks expanded and encoded: ~0.9 ms). So a build that would run into
# the next send's deadline waits for that send first. Its length is estimated per prompt token,
# from the builds so far (first guess: an imported prompt's ~60 ns a token), with a margin.
_BUILD_S_PER_TOKEN = 60e-9
_BUILD_MARGIN = 1.5
_BUILD_MIN_WAIT_S = 100e-6  # shorter builds never wait: a tenth of the loop's timer granularity
_BUILD_MEASURED_TOKENS = 4096  # smaller builds are mostly fixed cost: not counted per token
_BUILD_LAST_S = 0.02  # waiting stops this long before the call's own deadline: it builds then
# Last-byte sync (`RunOptions.last_byte_sync`, transports with `stage`): a built body's request is
# written but its last byte this long before its deadline, so that the send at the deadline writes
# one byte. Long enough for a burst's staging writes and a loaded loop's late timers to finish
# before the deadline; short, since each staged call holds a connection and the server holds an
# unfinished request. Short prompts are sent whole: their write costs what one byte's does.
_STAGE_S = 0.01
_STAGE_MIN_TOKENS = 2048
# A call this close to (or past) its deadline when it could be staged is sent whole: staging
# would only add a second write (a closed-loop call with no gap is due as soon as it is built)
_STAGE_MIN_LEAD_S = 0.001


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
    bytes, and a long run never holds more than a bounded amount of built bodies.

    It also knows the deadlines of the calls waiting to be sent (`until`), so that a build runs
    between sends instead of over one (`between_sends`, then `make`).
    """

    def __init__(
        self,
        prepare: Callable[[CompletionRequest], None],
        stage: Callable[[CompletionRequest], bool] | None = None,
        unstage: Callable[[CompletionRequest], None] | None = None,
        fire: Callable[[CompletionRequest, asyncio.Task | None], bool] | None = None,
        fired: Callable[[], None] | None = None,
    ) -> None:
        self._prepare = prepare
        self._stage = stage
        self._unstage = unstage
        self._fire = fire
        self._fired = fired  # after a group's `fire`s, in the same callback (the transport's arm)
        self.tokens = 0  # prompt tokens of the bodies built and not yet sent
        self.build_s_per_token = _BUILD_S_PER_TOKEN  # running estimate, from measured builds
        self._due: list[float] = []  # heap: deadlines of calls waiting in `until`
        self._sent: dict[float, int] = {}  # deadlines left `until` but still in the heap
        # built calls waiting for their deadline, per deadline (with a `fire`): the request, the
        # task that waits, and the future that `_fire_due` resolves with its send time (or None)
        self._groups: dict[
            float, list[tuple[CompletionRequest, asyncio.Task | None, asyncio.Future]]
        ] = {}
        self.fired_calls = 0  # calls whose last byte `_fire_due` wrote
        self.fired_groups = 0  # deadlines at which it wrote at least one

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

    def build_wait_s(self, tokens: int) -> float:
        """How long a build of a `tokens`-token prompt is expected to take (with a margin), for
        `between_sends`; 0.0 when it is too short to wait for."""
        need_s = tokens * self.build_s_per_token * _BUILD_MARGIN
        return need_s if need_s >= _BUILD_MIN_WAIT_S else 0.0

    def make(
        self, loop: asyncio.AbstractEventLoop, request: Callable[[], CompletionRequest]
    ) -> tuple[CompletionRequest, bool]:
        """`request()` (the prompt expanded) and its body built if the window has room (`build`);
        its measured length feeds the estimate of `build_wait_s`. Returns the request and
        whether its body was built."""
        t0 = loop.time()
        req = request()
        built = self.build(req)
        if built and len(req.prompt) >= _BUILD_MEASURED_TOKENS:
            # a slow average of the measured cost: one build preempted by another process
            # moves it a little, not to the preemption
            per_token = (loop.time() - t0) / len(req.prompt)
            self.build_s_per_token += 0.05 * (per_token - self.build_s_per_token)
        return req, built

    async def make_between_sends(
        self,
        loop: asyncio.AbstractEventLoop,
        request: Callable[[], CompletionRequest],
        prompt_tokens: int,
        t_ready: float,
    ) -> tuple[CompletionRequest, bool]:
        """`make`, after waiting (`between_sends`) when a build of `prompt_tokens` is long enough
        to run into a send due before the call's own deadline `t_ready`."""
        need_s = self.build_wait_s(prompt_tokens)
        if need_s:
            await self.between_sends(loop, need_s, t_ready)
        return self.make(loop, request)

    async def between_sends(
        self, loop: asyncio.AbstractEventLoop, need_s: float, t_ready: float
    ) -> None:
        """Wait until no send is due within `need_s` (a build's length, `build_wait_s`), or until
        the deadline `t_ready` of the call whose body is to be built is near."""
        while self._due:
            now = loop.time()
            due = self._due[0]
            if due > now + need_s or t_ready - now < need_s + _BUILD_LAST_S:
                return
            await sleep_until(loop, due)
            # the send's task wakes in the next turn: go after it
            await asyncio.sleep(0)
            if self._due and self._due[0] == due and loop.time() - due > _BUILD_LAST_S:
                return  # a send that late is stuck behind something else: do not wait on it

    async def until(
        self, loop: asyncio.AbstractEventLoop, req: CompletionRequest, t_ready: float, built: bool
    ) -> float | None:
        """Wait for `req`'s deadline, its body (if `built`) held in the window until then; with
        a `stage`, a long prompt's request is written but its last byte `_STAGE_S` before.

        With a `fire` too, the built calls due at one deadline are sent together: one timer
        sends them back to back in one callback (`_fire_due`: a staged call's last byte, another
        call's whole request), and this returns the loop time at which this call went out (None
        when it was not sent there: the caller sends it). Sent one task after another instead,
        each send of a burst waits for the Python between the earlier ones' writes (~0.15 ms a
        call), and on a virtual machine each write pays again to wake the server, which has
        gone idle meanwhile; back to back, a one-byte write costs a few microseconds."""
        heapq.heappush(self._due, t_ready)
        # joined now, before staging: a group is sent in the order its calls were built; a call
        # already due (a closed-loop call with no gap) is sent by its task at once, as before
        group = built and self._fire is not None and t_ready > loop.time()
        sent = self._join(loop, req, t_ready) if group else None
        staged = False
        try:
            if built and self._stage is not None and len(req.prompt) >= _STAGE_MIN_TOKENS:
                await sleep_until(loop, t_ready - _STAGE_S)
                if t_ready - loop.time() >= _STAGE_MIN_LEAD_S:
                    staged = self._stage(req)
            if sent is not None:
                return await sent
            await sleep_until(loop, t_ready)
            return None
        except BaseException:
            if sent is not None:
                sent.cancel()  # `_fire_due` skips it (if it has not sent it already)
            if (staged or sent is not None) and self._unstage is not None:  # it will not be sent
                self._unstage(req)
            raise
        finally:
            if built:
                self.tokens -= len(req.prompt)
            self._left(t_ready)

    def _join(
        self, loop: asyncio.AbstractEventLoop, req: CompletionRequest, t_ready: float
    ) -> asyncio.Future:
        """The future of `req`'s send within the group of staged calls due at `t_ready`."""
        fut = loop.create_future()
        group = self._groups.get(t_ready)
        if group is None:
            group = self._groups[t_ready] = []
            loop.call_at(t_ready, self._fire_due, loop, t_ready)
        group.append((req, asyncio.current_task(), fut))
        return fut

    def _fire_due(self, loop: asyncio.AbstractEventLoop, t_ready: float) -> None:
        """Send every built call due at `t_ready` (`fire`: a staged one's last byte, another's
        whole request), in the order they joined, back to back: the transport arms the responses
        (`fired`) and the waiting tasks get their results only after the last write. Each task
        gets the time of its own send, or None where `fire` sent nothing (its task sends it)."""
        assert self._fire is not None
        fire = self._fire
        done: list[tuple[asyncio.Future, float | None]] = []
        for req, task, fut in self._groups.pop(t_ready, ()):
            if fut.done():  # its task was cancelled: `until` unstages it
                continue
            t = loop.time()
            done.append((fut, t if fire(req, task) else None))
        if self._fired is not None:
            self._fired()
        fired = 0
        for fut, t_send in done:
            fired += t_send is not None
            if not fut.done():  # else cancelled by a fire: `until` unstages it
                fut.set_result(t_send)
        if fired:
            self.fired_calls += fired
            self.fired_groups += 1

    def _left(self, t_ready: float) -> None:
        """`t_ready`'s call no longer waits: drop it from the heap (lazily, from the top)."""
        sent, due = self._sent, self._due
        sent[t_ready] = sent.get(t_ready, 0) + 1
        while due and due[0] in sent:
            t = heapq.heappop(due)
            if sent[t] == 1:
                del sent[t]
            else:
                sent[t] -= 1


def ahead_window(
    transport: object,
    options: RunOptions,
    loop: asyncio.AbstractEventLoop,
    fire: Callable[[CompletionRequest, asyncio.Task | None], bool] | None = None,
) -> AheadWindow | None:
    """The pool's `AheadWindow` for `transport`, or None: the simulator's transport has nothing to
    build, and its virtual loop must see the same timers as before (one per call at its deadline)
    to give the same records. Requests are staged (`stage`) only where a send leaves at its
    deadline: a `max_inflight` or `max_rps` cap may hold it later, and a staged call would hold
    its connection and its unfinished request on the server meanwhile."""
    prepare = getattr(transport, "prepare", None)
    if prepare is None or isinstance(loop, VirtualTimeLoop):
        return None
    stage = unstage = None
    if options.last_byte_sync and options.max_inflight is None and options.max_rps is None:
        stage = getattr(transport, "stage", None)
        unstage = getattr(transport, "unstage", None)
    if stage is None:
        return AheadWindow(prepare)
    return AheadWindow(prepare, stage, unstage, fire, getattr(transport, "arm_fired", None))


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
