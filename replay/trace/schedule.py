"""The replay's scheduling rules, stated once: when each call of a trace may be sent.

Closed loop: `pool` slots take root tasks in trace order; a call is ready once the previous call
of its task and every `after` call have ended, plus its gap (times `gap_scale`); a sub-agent task
starts when the call that spawned it ends and takes no slot; a slot takes its next root task the
tail gap after its task's last call ends. Open loop (every call has `at_s`): calls arrive at their
arrival times, counted from the first arrival, whatever the server does.

Pure: no clock, no I/O. The driver's agent pool tells `ClosedLoop` when calls were sent and ended
on its event loop; the models tell it the times their service models computed. Both get back the
calls that became ready and when, so a prediction and a run follow the same rules.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from replay.errors import ConfigError, TraceError
from replay.trace.model import Call, CallRef, Trace

__all__ = [
    "MAX_SPAN_S",
    "MAX_AT_S",
    "Ready",
    "ClosedLoop",
    "is_open_loop",
    "arrivals",
    "check_pool",
    "smallest_pool",
]

# The longest stretch of time a trace may describe (about 31.7 years): a gap or an open-loop span
# past this is a unit mistake (milliseconds read as seconds), not a recording.
MAX_SPAN_S = 1e9
# Arrival times are counted from the first one, so epoch seconds (~1.7e9) are fine; past this
# (about 3,000 years) they are epoch milliseconds or worse.
MAX_AT_S = 1e11


@dataclass(frozen=True)
class Ready:
    """`call` may be sent at `t_s` (same clock as the times fed in); `slot` is its root task's.

    `call` None: `slot` frees at `t_s` (its task ended a tail gap before); the driver calls
    `ClosedLoop.free(slot, t_s)` then, and the slot takes the next root task at that moment.
    """

    call: Call | None
    slot: int
    t_s: float


class ClosedLoop:
    """The closed loop's state: which calls have ended, which wait, which slot takes what next.

    `start(t_s)` gives the first call of each slot's first task; `ended(ref, ...)` records that a
    handed-out call ended and gives the calls that became ready because of it; `free(slot, t_s)`
    is a slot freeing after a tail gap. `outstanding` counts what was handed out and has not come
    back: when it is 0 and calls are left, nothing can ever end again and those calls wait
    forever (`stuck`).
    """

    def __init__(self, trace: Trace, pool: int, *, gap_scale: float = 1.0, timing: str = "think"):
        if pool < 1:
            raise ConfigError("schedule", "pool", f"must be at least 1, got {pool}")
        self.trace = trace
        self.pool = pool
        self.gap_scale = gap_scale
        self.original = timing == "original"
        self.outstanding = 0
        self._tasks = trace.tasks
        self._roots = trace.root_task_ids
        self._next_root = 0
        self._children: dict[CallRef, list[str]] = {}
        for tid, calls in self._tasks.items():
            if calls[0].parent is not None:
                self._children.setdefault(calls[0].parent, []).append(tid)
        self._ended: dict[CallRef, float] = {}  # ended or skipped: when waiters may go on
        self._parked: dict[CallRef, list[tuple[Call, float, int]]] = {}  # by an unended `after`
        self._sent: dict[str, tuple[Call, float]] = {}  # task -> its last sent call, send time
        self._slot: dict[str, int] = {}  # task -> slot of its root task (sub-agents: parent's)
        self._holder: dict[int, str] = {}  # slot -> root task it runs, for messages

    # --- events --------------------------------------------------------------------------

    def start(self, t_s: float) -> list[Ready]:
        """The slots take their first root tasks at `t_s`."""
        out: list[Ready] = []
        for slot in range(min(self.pool, len(self._roots))):
            self._take_root(slot, t_s, out)
        return out

    def ended(
        self, ref: CallRef, t_send_s: float, t_end_s: float, *, abort: bool = False
    ) -> list[Ready]:
        """Call `ref`, sent at `t_send_s`, ended at `t_end_s`. `abort`: it failed and its task
        stops here; the rest of the task and the sub-agents it would spawn are skipped (their
        waiters go on from `t_end_s`, as if they had ended then)."""
        call = self.trace.call(ref)
        calls = self._tasks[call.task]
        slot = self._slot[call.task]
        self.outstanding -= 1
        self._sent[call.task] = (call, t_send_s)
        self._ended[ref] = t_end_s
        out: list[Ready] = []
        if abort:
            for c in calls[call.index + 1 :]:
                self._skip(c.ref, t_end_s, out)
        if not abort and call.index + 1 < len(calls):
            self._ready(calls[call.index + 1], t_end_s, slot, out)
        elif calls[0].parent is None:
            self._holder.pop(slot, None)
            tail_s = (calls[-1].tail_gap_s or 0.0) * self.gap_scale
            if not tail_s:
                self._take_root(slot, t_end_s, out)
            elif self._next_root < len(self._roots):
                # which root the slot takes is decided when it frees: another slot may free first
                self.outstanding += 1
                out.append(Ready(None, slot, t_end_s + tail_s))
        for child in self._children.get(ref, ()):
            if abort:
                self._skip_task(child, t_end_s, out)
            else:
                self._ready(self._tasks[child][0], t_end_s, slot, out)
        self._wake(ref, out)
        return out

    def free(self, slot: int, t_s: float) -> list[Ready]:
        """A slot handed out as `Ready(None, slot, t_s)` frees now: it takes the next root task."""
        self.outstanding -= 1
        out: list[Ready] = []
        self._take_root(slot, t_s, out)
        return out

    @property
    def finished(self) -> bool:
        """Every call has ended or was skipped."""
        return len(self._ended) == len(self.trace)

    @property
    def stuck(self) -> bool:
        """Nothing handed out is left to end, yet calls remain: they can never be sent."""
        return self.outstanding == 0 and not self.finished

    def explain(self) -> str:
        """Who waits on whom, when `stuck`, from the earliest waiting call down the chain to a
        task that never starts: for messages."""
        waiting_on = {c.ref: ref for ref, parked in self._parked.items() for c, _, _ in parked}
        first = self.first_waiting()
        if first is None:
            return "no call waits"
        blocked = {ref[0]: ref for ref in waiting_on}  # a task has at most one waiting call
        hops = [waiting_on[first.ref]]
        while hops[-1][0] in blocked and len(hops) < 8:
            nxt = waiting_on[blocked[hops[-1][0]]]
            if nxt in hops:
                break
            hops.append(nxt)
        chain = ", which waits on ".join(f"task {t!r} call {i}" for t, i in hops)
        text = f"task {first.task!r} call {first.index} waits on {chain}"
        last = hops[-1][0]
        if last not in self._slot and self._tasks[last][0].parent is None:
            holders = ", ".join(repr(t) for _, t in sorted(self._holder.items()))
            text += (
                f", a task that never starts: the {self.pool} slot(s) hold {holders}, which wait"
            )
        more = len(waiting_on) - 1
        return text + (f" ({more} more call(s) wait)" if more else "")

    def first_waiting(self) -> Call | None:
        """The waiting call earliest in the trace (None when none waits)."""
        position = {c.ref: i for i, c in enumerate(self.trace.calls)}
        waiting = [call for parked in self._parked.values() for call, _, _ in parked]
        return min(waiting, key=lambda c: position[c.ref], default=None)

    # --- rules ---------------------------------------------------------------------------

    def _take_root(self, slot: int, t_s: float, out: list[Ready]) -> None:
        if self._next_root < len(self._roots):
            task = self._roots[self._next_root]
            self._next_root += 1
            self._holder[slot] = task
            self._ready(self._tasks[task][0], t_s, slot, out)

    def _ready(self, call: Call, dep_end_s: float, slot: int, out: list[Ready]) -> None:
        """ready = max(dependency ends) + gap; parked on the first `after` call not yet ended."""
        self._slot[call.task] = slot
        for ref in call.after:
            if ref not in self._ended:
                self._parked.setdefault(ref, []).append((call, dep_end_s, slot))
                return
            dep_end_s = max(dep_end_s, self._ended[ref])
        t_s = dep_end_s + call.gap_s * self.gap_scale
        prev = self._sent.get(call.task) if call.index > 0 else None
        if self.original and prev is not None:
            rec, prev_rec = call.recorded or {}, prev[0].recorded or {}
            if "start_s" in rec and "start_s" in prev_rec:  # the recording's start-to-start pace
                pace_s = (rec["start_s"] - prev_rec["start_s"]) * self.gap_scale
                t_s = max(dep_end_s, prev[1] + pace_s)
        self.outstanding += 1
        out.append(Ready(call, slot, t_s))

    def _wake(self, ref: CallRef, out: list[Ready]) -> None:
        for call, dep_end_s, slot in self._parked.pop(ref, ()):
            self._ready(call, dep_end_s, slot, out)

    def _skip(self, ref: CallRef, t_s: float, out: list[Ready]) -> None:
        self._ended[ref] = t_s
        for child in self._children.get(ref, ()):
            self._skip_task(child, t_s, out)
        self._wake(ref, out)

    def _skip_task(self, task: str, t_s: float, out: list[Ready]) -> None:
        for c in self._tasks[task]:
            self._skip(c.ref, t_s, out)


# --- open loop ------------------------------------------------------------------------------


def is_open_loop(trace: Trace) -> bool:
    """True when every call has `at_s`; a mix, arrivals out of order within a task, arrivals
    spread over more than `MAX_SPAN_S`, or an open-loop call with `after` or `parent` raise
    TraceError (FILE:LINE: field: why)."""
    file = trace.path or "trace"
    with_at = [c for c in trace.calls if c.at_s is not None]
    if not with_at:
        return False
    if len(with_at) != len(trace.calls):
        lacking = next(c for c in trace.calls if c.at_s is None)
        raise TraceError(
            file,
            lacking.line or None,
            "at_s",
            f"{len(with_at)} of {len(trace.calls)} calls have arrival times; a trace is either open "
            "loop (every call has at_s) or closed loop (none has)",
        )
    for c in trace.calls:  # open loop sends each call at its at_s: no dependency could hold it
        ignored = "after" if c.after else "parent" if c.parent else None
        if ignored:
            raise TraceError(
                file,
                c.line or None,
                ignored,
                "an open-loop call (every call has at_s) is sent at its at_s, so this dependency "
                f"would be ignored: drop {ignored} here, or at_s everywhere to replay closed loop",
            )
    for task, calls in trace.tasks.items():
        for a, b in zip(calls, calls[1:], strict=False):
            if float(b.at_s or 0.0) < float(a.at_s or 0.0):
                raise TraceError(
                    file,
                    b.line or None,
                    "at_s",
                    f"task {task!r}: call {b.index} arrives before call {a.index}",
                )
    first = min(with_at, key=lambda c: float(c.at_s or 0.0))
    last = max(with_at, key=lambda c: float(c.at_s or 0.0))
    span_s = float(last.at_s or 0.0) - float(first.at_s or 0.0)
    if span_s > MAX_SPAN_S:
        raise TraceError(
            file,
            last.line or None,
            "at_s",
            f"arrives {span_s:.3g} s after the first call (more than {MAX_SPAN_S:.0e} s): "
            "arrival times must be seconds (milliseconds divided by 1000)",
        )
    return True


def arrivals(trace: Trace, gap_scale: float = 1.0) -> Iterator[tuple[Call, float]]:
    """Open loop: (call, arrival) in arrival order (ties in file order), seconds after the first
    arrival times `gap_scale`. Rebased so that epoch timestamps need no huge clock values."""
    order = sorted(range(len(trace.calls)), key=lambda k: (trace.calls[k].at_s, k))
    if not order:
        return
    first_s = float(trace.calls[order[0]].at_s or 0.0)
    for k in order:
        c = trace.calls[k]
        yield c, (float(c.at_s or 0.0) - first_s) * gap_scale


# --- can a pool of A run this trace? ------------------------------------------------------


def _stuck_with(trace: Trace, pool: int) -> ClosedLoop | None:
    """Play the rules with every call taking no time; the loop if calls are left waiting.

    Whether a pool deadlocks does not depend on timing: a call ends iff its dependencies end and
    its task starts, and a root task starts iff enough earlier ones end to free a slot. That is
    monotone, so every run reaches the same set of ended calls as this one.
    """
    rules = ClosedLoop(trace, pool, gap_scale=0.0)
    todo = rules.start(0.0)
    while todo:
        r = todo.pop()
        todo.extend(
            rules.free(r.slot, 0.0) if r.call is None else rules.ended(r.call.ref, 0.0, 0.0)
        )
    return rules if rules.stuck else None


def smallest_pool(trace: Trace) -> int:
    """The smallest pool that can run every call of an (acyclic, closed-loop) trace: more slots
    never make a wait longer, so bisect between 1 and one slot per root task."""
    lo, hi = 0, max(1, len(trace.root_task_ids))  # lo deadlocks (or is 0), hi works
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _stuck_with(trace, mid) is None:
            hi = mid
        else:
            lo = mid
    return hi


def check_pool(trace: Trace, pool: int) -> None:
    """Raise TraceError (FILE:LINE: after: why) when `pool` slots can never run every call: a
    call waits on a task that starts only once a slot frees, and every slot holds a waiting task.
    Open-loop traces ignore the pool and always pass."""
    if pool < 1:
        raise ConfigError("schedule", "pool", f"must be at least 1, got {pool}")
    if is_open_loop(trace) or not any(c.after for c in trace.calls):
        return  # without `after` a task waits only on its own calls and its parent
    rules = _stuck_with(trace, pool)
    if rules is None:
        return
    waiting = rules.first_waiting()
    fix = f"the smallest pool that runs it is {smallest_pool(trace)}"
    raise TraceError(
        trace.path or "trace",
        waiting.line or None if waiting is not None else None,
        "after",
        f"with a pool of {pool}, {rules.explain()}; {fix}",
    )
