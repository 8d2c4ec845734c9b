"""Reference orders: when each call reaches the cache, which decides what it finds there.

A call touches the caches three times (the simulator's and vLLM's sequence): its lookup when it is
admitted, the end of its prefill (its prompt's blocks become reusable; write-through stores its
missing prompt chunks in the host tier), and its end (its blocks, output included, return to the
device's LRU queue). A `Schedule` gives these three times per call; calls that overlap in time do
not see each other's not-yet-stored chunks.

- `trace_schedule`: calls one after another in trace order (arrival order for open-loop traces).
  For a task-ordered file that is a pool of one.
- `closed_loop_schedule`: the driver's closed loop played in virtual time for `pool` slots, with a
  simple service-time model standing in for the server. The rules are the pool's own, from
  `replay.trace.schedule` (slots take root tasks in trace order; a call waits for its task's
  previous call, its `after` calls and its gap; sub-agents start when their spawning call ends
  and take no slot).
- a recorded run's times (`t_send`, `t_first_token`, `t_end` of its calls): read at the edge by
  `replay.model.run_order.read_run_schedule`.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

import numpy as np

from replay.errors import ConfigError
from replay.model.service import EngineQueue, ServiceModel, StepRoofline
from replay.trace.model import Call, CallRef, Trace
from replay.trace.schedule import ClosedLoop, Ready, arrivals, check_pool, is_open_loop

__all__ = [
    "ORDERS",
    "EngineQueue",
    "Pacing",
    "Schedule",
    "ServiceModel",
    "StepRoofline",
    "trace_order",
    "trace_schedule",
    "closed_loop_order",
    "closed_loop_schedule",
    "LOOKUP",
    "PREFILL_DONE",
    "END",
]

ORDERS = ("trace", "pool")  # names `predict_tiers` accepts besides refs or a Schedule

# Event kinds; at equal times a call's end and prefill come before another call's lookup (an
# engine applies a finished step before it admits new requests).
END, PREFILL_DONE, LOOKUP = 0, 1, 2


@dataclass(frozen=True, eq=False)
class Schedule:
    """Per call (in lookup order): lookup, prefill-done and end times (seconds, any origin)."""

    refs: list[CallRef]
    t_lookup_s: np.ndarray
    t_prefill_s: np.ndarray
    t_end_s: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.refs)
        for name in ("t_lookup_s", "t_prefill_s", "t_end_s"):
            if len(getattr(self, name)) != n:
                raise ConfigError("schedule", name, f"needs one time per call ({n})")
        if n and not (
            np.all(self.t_prefill_s >= self.t_lookup_s) and np.all(self.t_end_s >= self.t_prefill_s)
        ):
            raise ConfigError("schedule", "times", "each call needs lookup <= prefill <= end")

    def __len__(self) -> int:
        return len(self.refs)

    @classmethod
    def sequential(cls, refs: Sequence[CallRef]) -> Schedule:
        """Each call done (looked up, prefilled, ended) before the next one starts."""
        i = np.arange(len(refs), dtype=np.float64)
        return cls([(str(t), int(c)) for t, c in refs], i, i + 0.25, i + 0.5)

    def events(self) -> tuple[np.ndarray, np.ndarray]:
        """(call position, event kind) of every event in time order.

        At equal times ends come first, then prefill ends, then lookups. A call's own phases stay
        in order: a phase of zero length ends just after (one float step) the one before it.
        """
        n = len(self.refs)
        t_pre = np.where(
            self.t_prefill_s > self.t_lookup_s,
            self.t_prefill_s,
            np.nextafter(self.t_lookup_s, np.inf),
        )
        t_end = np.where(self.t_end_s > t_pre, self.t_end_s, np.nextafter(t_pre, np.inf))
        times = np.concatenate([t_end, t_pre, self.t_lookup_s])
        kinds = np.repeat(np.array([END, PREFILL_DONE, LOOKUP], np.int64), n)
        calls = np.tile(np.arange(n, dtype=np.int64), 3)
        ranked = np.lexsort((calls, kinds, times))
        return calls[ranked], kinds[ranked]


def trace_order(trace: Trace) -> list[CallRef]:
    """Calls in trace order (by arrival time, ties in file order, when every call has `at_s`)."""
    if is_open_loop(trace):
        return [c.ref for c, _ in arrivals(trace)]
    return [c.ref for c in trace.calls]


def trace_schedule(trace: Trace) -> Schedule:
    """Calls one after another in trace order."""
    return Schedule.sequential(trace_order(trace))


def _new_tokens(trace: Trace, call: Call) -> int:
    """Prompt tokens a call adds past what its task's previous call already had (prefill work)."""
    if call.index == 0:
        return call.prompt_len
    kept = (
        call.keep * (trace.header.block_size or 1) if trace.header.tokens == "blocks" else call.keep
    )
    return max(0, call.prompt_len - kept)


class _Server:
    """The stand-in server: admits sent calls (first come, first served for device space with a
    queue, at once without), prefills them one at a time (with a queue) and decodes them in one
    batch. Records every call's (lookup, prefill end, end) in admission order."""

    def __init__(
        self,
        trace: Trace,
        service: ServiceModel,
        queue: EngineQueue | None,
        jitter: float,
        rng: np.random.Generator | None,
    ) -> None:
        self.trace, self.service, self.queue = trace, service, queue
        self.jitter, self.rng = jitter, rng
        self.refs: list[CallRef] = []
        self.times: list[tuple[float, float, float]] = []
        self.in_flight: dict[CallRef, int] = {}  # admitted, not ended: context tokens (the batch)
        self.waiting: deque[Call] = deque()  # sent, not admitted (only with a queue)
        self.held = 0  # device tokens the admitted calls reserve
        self.prefill_free = 0.0  # when the prefill compute is next free

    def send(self, call: Call, t: float) -> list[tuple[float, Call]]:
        """A call arrives at `t`: (end time, call) of each call admitted now."""
        if self.queue is None:
            return [self._admit(call, t)]
        self.waiting.append(call)
        return self._admit_waiting(t)

    def end(self, call: Call, t: float) -> list[tuple[float, Call]]:
        """A call ends at `t` and frees its share: (end time, call) of each call admitted now."""
        self.in_flight.pop(call.ref, None)
        if self.queue is None:
            return []
        self.held -= call.prompt_len + call.output_len
        return self._admit_waiting(t)

    def schedule(self) -> Schedule:
        grid = np.array(self.times, np.float64).reshape(-1, 3)
        return Schedule(self.refs, grid[:, 0], grid[:, 1], grid[:, 2])

    def _admit(self, call: Call, t: float) -> tuple[float, Call]:
        new = _new_tokens(self.trace, call)
        start = t
        if self.queue is not None:
            new = min(call.prompt_len, self.queue.prefill_tokens.get(call.ref, new))
            start = max(t, self.prefill_free)
            self.held += call.prompt_len + call.output_len
        stretch = 1.0
        if self.jitter and self.rng is not None:  # drawn per call in admission order
            stretch += self.jitter * float(self.rng.uniform(-1.0, 1.0))
        t_pre = start + stretch * self.service.prefill_s(new, call.prompt_len - new)
        if self.queue is not None:
            self.prefill_free = t_pre
        batch = tuple(self.in_flight.values())
        t_end = t_pre + stretch * self.service.decode_s(call.output_len, call.prompt_len, batch)
        self.refs.append(call.ref)
        self.times.append((t, t_pre, t_end))
        self.in_flight[call.ref] = call.prompt_len
        return t_end, call

    def _admit_waiting(self, t: float) -> list[tuple[float, Call]]:
        assert self.queue is not None
        out = []
        while self.waiting:
            call = self.waiting[0]
            room = self.queue.device_tokens
            if room and self.in_flight and self.held + call.prompt_len + call.output_len > room:
                break  # first come first served: the head waits for device space
            self.waiting.popleft()
            out.append(self._admit(call, t))
        return out


class Pacing(TypedDict):
    """When a closed loop sends its calls: the run's `gap_scale` and `timing` (`RunOptions`)."""

    gap_scale: float
    timing: str


def closed_loop_schedule(
    trace: Trace,
    pool: int,
    *,
    service: ServiceModel | None = None,
    gap_scale: float = 1.0,
    timing: str = "think",
    jitter: float = 0.0,
    rng: np.random.Generator | None = None,
    queue: EngineQueue | None = None,
) -> Schedule:
    """Times of a closed-loop replay of `trace` with `pool` slots, in virtual time.

    The rules are the driver's (`replay.trace.schedule.ClosedLoop`); this plays them against
    `_Server`. Events at equal times keep the order in which they arose. `gap_scale` and `timing`
    are the run's (`RunOptions`): they decide when each call is sent, so the order of references.
    Open-loop traces (every call has `at_s`) ignore the pool: calls arrive at their `at_s`.
    `jitter` > 0 (with `rng`) stretches each call's service time by 1 + jitter * U(-1, 1), drawn
    per call in admission order: a server whose step times vary as the simulator's `--jitter` does.
    With `queue` a call's lookup is its admission by the engine (see `EngineQueue`); without, every
    call is admitted when it is sent and prefills at once.
    """
    if pool < 1:
        raise ConfigError("order", "pool", f"must be at least 1, got {pool}")
    if not 0 <= jitter < 1:
        raise ConfigError("order", "jitter", f"must be in [0, 1), got {jitter}")
    if jitter and rng is None:
        raise ConfigError("order", "rng", "jitter needs a random generator (seeded by the caller)")
    service = service or ServiceModel()
    server = _Server(trace, service, queue, jitter, rng)
    if is_open_loop(trace):
        return _open_loop_schedule(trace, server, gap_scale)
    rules = ClosedLoop(trace, pool, gap_scale=gap_scale, timing=timing)
    heap: list[tuple[float, int, Ready | Call]] = []  # (time, sequence, ready call | ending call)
    seq = itertools.count()
    sent_at: dict[CallRef, float] = {}

    def push(events: list[Ready] | list[tuple[float, Call]]) -> None:
        for e in events:
            t, item = (e.t_s, e) if isinstance(e, Ready) else e
            heapq.heappush(heap, (t, next(seq), item))

    push(rules.start(0.0))
    while heap:
        t, _, item = heapq.heappop(heap)
        if isinstance(item, Ready):
            if item.call is None:
                push(rules.free(item.slot, t))
            else:
                sent_at[item.call.ref] = t
                push(server.send(item.call, t))
            continue
        admitted = server.end(item, t)
        push(rules.ended(item.ref, sent_at[item.ref], t))
        push(admitted)
    if not rules.finished:
        check_pool(trace, pool)  # calls wait forever: raises, naming who waits on whom
    return server.schedule()


def _open_loop_schedule(trace: Trace, server: _Server, gap_scale: float) -> Schedule:
    """Calls arrive at their `at_s` (from the first arrival) whatever the server does, and the
    same server serves them as in the closed loop: its queue, its jitter and the batch in
    flight apply (they were dropped here while the prediction said it had them)."""
    heap: list[tuple[float, int, bool, Call]] = []  # (time, sequence, is an end, call)
    seq = itertools.count()
    for call, t in arrivals(trace, gap_scale):
        heapq.heappush(heap, (t, next(seq), False, call))
    while heap:
        t, _, is_end, call = heapq.heappop(heap)
        for t_end, admitted in server.end(call, t) if is_end else server.send(call, t):
            heapq.heappush(heap, (t_end, next(seq), True, admitted))
    return server.schedule()


def closed_loop_order(
    trace: Trace,
    pool: int,
    *,
    service: ServiceModel | None = None,
    gap_scale: float = 1.0,
) -> list[CallRef]:
    """Send order of `closed_loop_schedule`."""
    return closed_loop_schedule(trace, pool, service=service, gap_scale=gap_scale).refs
