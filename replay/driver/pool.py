"""The agent pool: replays a trace through a transport, keeping every recorded dependency.

The rules (which call is ready when: slots, dependencies, sub-agents, joins, open-loop arrivals)
are `replay.trace.schedule`'s, shared with the models; this module only acts on them: it sleeps
until each ready time, sends, and reports each call's end back to the rules. A wait that can never
end (every slot holds a task waiting on a task that has not started) fails the run with a reason
instead of hanging.

Time is only ever read from `loop.time()`, and sends wait for absolute deadlines
(`replay.driver.pacing`), so the same code paces a real server on a normal loop and the simulator
on `replay.clock.VirtualTimeLoop`. What a step's request is and what a call's row holds is
`replay.driver.outcome`'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any

from replay.clock import VirtualTimeLoop
from replay.driver.options import RunOptions
from replay.driver.outcome import Prompts, call_row
from replay.driver.pacing import ahead_window, make_rate_limiter, probe_lag, sleep_until
from replay.driver.pool_types import PoolStats, RunControl, RunResult
from replay.errors import ErrorKind, RequestFailed, ServerGone
from replay.protocol import CompletionRequest, CompletionResult, ConnectionRefused, Transport
from replay.status import CallStatus, RunStatus
from replay.trace.model import Trace
from replay.trace.schedule import ClosedLoop, Ready, arrivals, is_open_loop

__all__ = ["RunResult", "RunControl", "PoolStats", "replay"]

Sink = Callable[[dict[str, Any]], None]

# Python 3.11 reads an enum member off its class through a descriptor (~0.4 us): once per call
_OK = CallStatus.OK


async def replay(
    trace: Trace,
    transport: Transport,
    options: RunOptions,
    sink: Sink | None = None,
    *,
    control: RunControl | None = None,
    on_ready: Callable[[], None] | None = None,
) -> RunResult:
    """Replay `trace` through `transport` on the running loop; start and close the transport.

    Every finished call becomes a row (see docs/results.md) passed to `sink` as soon as it ends.
    `on_ready()` is called once the transport has started and the slots' first prompts are
    expanded, just before the run's clock starts (`run_replay` freezes the set-up out of the GC).
    """
    pool = _Pool(trace, transport, options, sink, on_ready)
    if control is not None:
        control._pool = pool
        if control._pending:
            pool.stop(*control._pending)
    await transport.start()
    try:
        return await pool.run()
    finally:
        await transport.close()


class _Pool:
    def __init__(
        self,
        trace: Trace,
        transport: Transport,
        options: RunOptions,
        sink: Sink | None,
        on_ready: Callable[[], None] | None = None,
    ) -> None:
        self.trace = trace
        self.on_ready = on_ready
        self.transport = transport
        self.opt = options
        self.sink = sink
        self.open_loop = is_open_loop(trace)
        self.rules = ClosedLoop(
            trace, options.pool, gap_scale=options.gap_scale, timing=options.timing
        )
        self.loop = asyncio.get_running_loop()
        self.virtual = isinstance(self.loop, VirtualTimeLoop)
        self.t0 = self.loop.time()
        self.rows: list[dict[str, Any]] = []
        self.stats = PoolStats(total=len(trace))
        self.status = RunStatus.OK
        self.reason: str | None = None
        self.stopping = False
        self.skipped = 0
        self.retries = 0
        self.refused_since: float | None = None
        self.answered_at: float | None = None  # the server's last answer of any kind (None: t0)
        # time with a call in flight since that answer: an agent's own gap is no silence
        self._silent_busy_s = 0.0
        self._busy_since: float | None = None
        self._silence_check: asyncio.TimerHandle | None = None  # when the silence is due
        self.lags: list[float] = []
        self._tick: Callable[[], None] | None = None  # the progress bar's, on a virtual loop
        self._prompts = Prompts(trace, options)
        self._agents: set[asyncio.Task] = set()
        self._sending: set[asyncio.Task] = set()
        self._all_done = self.loop.create_future()
        self._hurry = self.loop.create_future()  # set: in-flight calls get no more grace
        self._sem = asyncio.Semaphore(options.max_inflight) if options.max_inflight else None
        self._rate = make_rate_limiter(options.max_rps, self.loop) if options.max_rps else None
        self._ahead = ahead_window(transport, options, self.loop, self._fire_staged)

    # --- lifecycle -------------------------------------------------------------------------

    async def run(self) -> RunResult:
        bar = None
        if self.opt.progress:
            from replay.driver.progress import ProgressBar

            sim_time = (lambda: self.loop.time() - self.t0) if self.virtual else None
            bar = ProgressBar(
                self.stats, self.rows, self.trace, plain=self.opt.progress_plain, sim_time=sim_time
            )
            if self.virtual:  # redrawn as calls end: a timer would tick in simulated time
                self._tick = bar.tick
        helpers: list[asyncio.Task] = []
        if self.open_loop:
            early = self._build_early()
            if self.on_ready is not None:
                self.on_ready()
            self.t0 = self.loop.time()
            self._spawn(self._dispatch_open_loop(early))
        else:
            # Each slot's first prompt is expanded before the clock starts: done at t0, a
            # thousand slots' worth (~50 us each) would hold back the first sends by tens of ms.
            for task in self.trace.root_task_ids[: self.opt.pool]:
                self._prompts.start(task)
            if self.on_ready is not None:
                self.on_ready()
            self.t0 = self.loop.time()
            self._go(self.rules.start(self.t0))
        if not self.virtual:
            helpers.append(self.loop.create_task(probe_lag(self.loop, self.lags)))
        if bar is not None and not self.virtual:
            helpers.append(self.loop.create_task(bar.run()))
        if not self._agents and not self._all_done.done():
            self._all_done.set_result(None)
        try:
            await self._all_done
            if self.stopping:
                await self._drain()
        except asyncio.CancelledError:
            self.stop(RunStatus.INTERRUPTED, "cancelled")
            await self._drain()
            raise
        finally:
            self._no_silence_due()  # the run is over: no silence can fail it now
            for h in helpers:
                h.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
            if bar is not None:
                bar.close()
        if self.status == RunStatus.OK and self.stats.errors:
            self.status = RunStatus.ERRORS
        sent = {(r["task"], r["call"]) for r in self.rows}
        self.skipped = len(self.trace) - len(sent)
        return RunResult(
            status=self.status,
            reason=self.reason,
            rows=self.rows,
            total_calls=len(self.trace),
            skipped_calls=self.skipped,
            connection_retries=self.retries,
            loop_lag_s=self.lags,
            open_loop=self.open_loop,
        )

    def stop(self, status: RunStatus, reason: str) -> None:
        """No new sends; waiting agents end now, in-flight calls get `interrupt_grace_s`."""
        if self.stopping:
            return
        self.stopping = True
        self.status, self.reason = status, reason
        for t in list(self._agents):
            if t not in self._sending:
                t.cancel()
        if not self._all_done.done():
            self._all_done.set_result(None)

    def hurry(self) -> None:
        if not self._hurry.done():
            self._hurry.set_result(None)

    async def _drain(self) -> None:
        """Give in-flight calls `interrupt_grace_s` (less if hurried), then cancel the rest."""
        deadline = self.loop.time() + self.opt.interrupt_grace_s
        while not self._hurry.done():
            pending = {t for t in self._agents if not t.done()}
            left_s = deadline - self.loop.time()
            if not pending or left_s <= 0:
                break
            await asyncio.wait(
                pending | {self._hurry}, timeout=left_s, return_when=asyncio.FIRST_COMPLETED
            )
        for t in list(self._agents):
            t.cancel()
        await asyncio.gather(*self._agents, return_exceptions=True)

    def _spawn(self, coro) -> None:
        t = self.loop.create_task(coro)
        self._agents.add(t)
        t.add_done_callback(self._agent_done)

    def _agent_done(self, t: asyncio.Task) -> None:
        self._agents.discard(t)
        self._sending.discard(t)
        if not t.cancelled() and t.exception() is not None and not self.stopping:
            self.stop(RunStatus.FAILED, f"internal error: {t.exception()!r}")
        if not self._agents and not self._all_done.done():
            self._all_done.set_result(None)

    # --- closed loop -----------------------------------------------------------------------

    def _go(self, ready: list[Ready]) -> None:
        """Start the calls the rules made ready; fail the run if none is left to end and calls
        still wait (they never can: no hang, a reason)."""
        for r in ready:
            self._spawn(self._call(r))
        if self.rules.stuck and not self.stopping:
            self.stop(RunStatus.FAILED, f"deadlock: {self.rules.explain()}")

    async def _call(self, r: Ready) -> None:
        """Send one ready call at its ready time and hand its end back to the rules."""
        c = r.call
        req = None
        ahead = self._ahead
        if c is not None and ahead is not None:
            request = partial(self._prompts.request, c.task, c.index)
            req, built = await ahead.make_between_sends(self.loop, request, c.prompt_len, r.t_s)
            fired_at = await ahead.until(self.loop, req, r.t_s, built)
        else:
            fired_at = None
            await sleep_until(self.loop, r.t_s)
        if self.stopping and fired_at is None:  # a fired call is in flight: it gets recorded
            return
        if c is None:  # a slot freed after its task's tail gap
            self._go(self.rules.free(r.slot, r.t_s))
            return
        if req is None:
            req = self._prompts.request(c.task, c.index)
        row = await self._send(req, r.slot, r.t_s, fired_at)
        if self.stopping:
            return
        abort = row["status"] != _OK and self.opt.on_error == "abort-task"
        if abort:
            self._prompts.drop(c.task)
        t_send, t_end = self.t0 + row["t_send"], self.t0 + row["t_end"]
        self._go(self.rules.ended(c.ref, t_send, t_end, abort=abort))

    # --- open loop -------------------------------------------------------------------------

    def _build_early(self) -> dict[tuple[str, int], tuple[CompletionRequest, bool]]:
        """The arrivals due within the build lead, built (in arrival order) before the clock
        starts: after it they would be built past their deadlines, one after another."""
        early: dict[tuple[str, int], tuple[CompletionRequest, bool]] = {}
        if self._ahead is None:
            return early
        for c, at_s in arrivals(self.trace, self.opt.gap_scale):
            if at_s >= self._ahead.lead_s:
                break
            request = partial(self._prompts.request, c.task, c.index)
            early[(c.task, c.index)] = self._ahead.make(self.loop, request)
        return early

    async def _dispatch_open_loop(
        self, early: dict[tuple[str, int], tuple[CompletionRequest, bool]]
    ) -> None:
        """Walk the arrivals in order; each call's prompt is expanded (and, where the transport
        can, its body built) a little before its arrival, and sent at its arrival. `early`
        holds the first ones, already built (`_build_early`)."""
        ahead = 0.0 if self._ahead is None else self._ahead.lead_s
        for c, at_s in arrivals(self.trace, self.opt.gap_scale):
            t_ready = self.t0 + at_s
            got = early.pop((c.task, c.index), None)
            if got is not None:
                self._spawn(self._send_open(*got, t_ready))
                continue
            await sleep_until(self.loop, t_ready - ahead)
            if self.stopping:
                return
            # arrival order within a task is checked by is_open_loop
            if self._ahead is None:
                req = self._prompts.request(c.task, c.index)
                self._spawn(self._send_open(req, False, t_ready))
                continue
            request = partial(self._prompts.request, c.task, c.index)
            req, built = await self._ahead.make_between_sends(
                self.loop, request, c.prompt_len, t_ready
            )
            if self.stopping:
                if built:  # never sent: its tokens leave the window here
                    self._ahead.tokens -= len(req.prompt)
                return
            self._spawn(self._send_open(req, built, t_ready))
            # let the sends already due go first: building runs ahead of time, not ahead of them
            await asyncio.sleep(0)

    async def _send_open(self, req: CompletionRequest, built: bool, t_ready: float) -> None:
        fired_at = None
        if self._ahead is not None:
            fired_at = await self._ahead.until(self.loop, req, t_ready, built)
        else:  # at once: the dispatcher waited for the arrival itself
            await sleep_until(self.loop, t_ready)
        if self.stopping and fired_at is None:
            return
        await self._send(req, -1, t_ready, fired_at)

    # --- one call --------------------------------------------------------------------------

    async def _send(
        self, req: CompletionRequest, slot: int, t_ready: float, fired_at: float | None = None
    ) -> dict[str, Any]:
        """Send `req` (unless `_fire_staged` sent it, at `fired_at`) and record its row."""
        if self._sem is not None:
            async with self._sem:
                return await self._send_now(req, slot, t_ready, fired_at)
        return await self._send_now(req, slot, t_ready, fired_at)

    def _fire_staged(self, req: CompletionRequest, task: asyncio.Task | None) -> bool:
        """`AheadWindow`'s send of a built call at its deadline, from a loop callback (False:
        not sent; its task sends it or stops). Its task counts as sending from here: a stop
        gives the call the in-flight grace, not a cancellation that would leave it unrecorded."""
        if self.stopping or not self.transport.fire(req):  # type: ignore[attr-defined]
            return False
        if task is not None:
            self._sending.add(task)
        return True

    async def _send_now(
        self, req: CompletionRequest, slot: int, t_ready: float, fired_at: float | None
    ) -> dict[str, Any]:
        if self._rate is not None and fired_at is None:
            await self._rate.wait(self.loop)
        me = asyncio.current_task()
        self._sending.add(me)  # type: ignore[arg-type]
        if not self.stats.inflight:
            self._busy_since = self.loop.time()
        self.stats.inflight += 1
        t_send = t_first = self.loop.time() if fired_at is None else fired_at
        result: CompletionResult | None = None
        error: RequestFailed | None = None
        try:
            result, t_send, error = await self._complete_retrying(req, t_send)
        except asyncio.CancelledError:
            error = RequestFailed(ErrorKind.CANCELLED, "run stopped while the call was in flight")
            self._record(req, slot, t_ready, t_send, None, error, t_first)
            raise
        finally:
            self.stats.inflight -= 1
            if not self.stats.inflight and self._busy_since is not None:
                self._silent_busy_s += self.loop.time() - self._busy_since
                self._busy_since = None
            self._sending.discard(me)  # type: ignore[arg-type]
        return self._record(req, slot, t_ready, t_send, result, error, t_first)

    async def _complete_retrying(
        self, req: CompletionRequest, t_send: float
    ) -> tuple[CompletionResult | None, float, RequestFailed | None]:
        """Send once; on connection refused, retry until the server-gone grace has passed."""
        backoff_s = 0.05
        while True:
            try:
                res = await self.transport.complete(req)
                self.refused_since = None
                self._answered()
                return res, t_send, None
            except ServerGone as e:
                self.stop(RunStatus.FAILED, f"server gone: {e}")
                return None, t_send, RequestFailed(ErrorKind.CONNECTION, str(e))
            except ConnectionRefused as e:
                now = self.loop.time()
                if self.refused_since is None:
                    self.refused_since = now
                if now - self.refused_since >= self.opt.server_gone_grace_s or self.stopping:
                    grace = self.opt.server_gone_grace_s
                    self.stop(
                        RunStatus.FAILED, f"server gone: refused connections for {grace:g} s: {e}"
                    )
                    return None, t_send, e
                self.retries += 1
                await sleep_until(self.loop, now + backoff_s)
                backoff_s = min(1.0, backoff_s * 2)
                t_send = self.loop.time()
            except RequestFailed as e:
                if e.kind == ErrorKind.TIMEOUT:
                    self._check_silence(e)
                elif e.kind != ErrorKind.CONNECTION:  # an HTTP error or a bad body: it answered
                    self._answered()
                return None, t_send, e

    def _answered(self) -> None:
        now = self.answered_at = self.loop.time()
        self._silent_busy_s = 0.0
        self._no_silence_due()  # the server spoke
        if self._busy_since is not None:  # calls still in flight: their silence starts now
            self._busy_since = now

    def _check_silence(self, timeout: RequestFailed) -> None:
        """Fail the run once the server has answered nothing, while calls timed out, for the
        request timeout plus the server-gone grace of time with a call in flight: a server that
        accepts connections and never replies (hung, stopped with SIGSTOP, a wrong port that
        listens) would otherwise take every call to its timeout, one after another per task, for
        hours, and end as `errors`. Only time with a call in flight counts: one call timing out
        after an agent's long gap once failed a healthy run as a silent server."""
        silent_s = self._silent_busy_s
        if self._busy_since is not None:
            silent_s += self.loop.time() - self._busy_since
        limit_s = self.opt.request_timeout_s + self.opt.server_gone_grace_s
        if self.stopping:
            return
        if silent_s >= limit_s:
            self.stop(
                RunStatus.FAILED,
                f"server not answering: no response for {silent_s:.0f} s while calls timed out "
                f"(request timeout {self.opt.request_timeout_s:g} s + server-gone grace "
                f"{self.opt.server_gone_grace_s:g} s): {timeout}",
            )
        elif self._silence_check is None:
            # look again when the silence would be due, not at the next call's timeout: that
            # came up to a whole request timeout late (15 s of silence for a limit of 10)
            self._silence_check = self.loop.call_later(
                limit_s - silent_s, self._recheck_silence, timeout
            )

    def _no_silence_due(self) -> None:
        if self._silence_check is not None:
            self._silence_check.cancel()
            self._silence_check = None

    def _recheck_silence(self, timeout: RequestFailed) -> None:
        self._silence_check = None
        if self.stats.inflight:  # idle, the silence is not growing: the next timeout checks
            self._check_silence(timeout)

    def _record(
        self,
        req: CompletionRequest,
        slot: int,
        t_ready: float,
        t_send: float,
        res: CompletionResult | None,
        error: RequestFailed | None,
        t_first_send: float | None = None,
    ) -> dict[str, Any]:
        t_end = res.t_end if res is not None else self.loop.time()
        row, stop_reason = call_row(
            req, slot, self.t0, t_ready, t_send, t_end, res, error, strict=self.opt.strict,
            t_first_send=t_first_send,
        )  # fmt: skip
        if stop_reason is not None:
            self.stop(RunStatus.FAILED, stop_reason)
        if row["status"] != _OK:
            self.stats.errors += 1
        self.stats.done += 1
        self.rows.append(row)
        if self._tick is not None:
            self._tick()
        if self.sink is not None:
            self.sink(row)
        return row
