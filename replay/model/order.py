"""Reference orders: when each call reaches the cache, which decides what it finds there.

A call touches the caches three times (the simulator's and vLLM's sequence): its lookup when it is
admitted, the end of its prefill (its prompt's blocks become reusable; write-through stores its
missing prompt chunks in the host tier), and its end (its blocks, output included, return to the
device's LRU queue). A `Schedule` gives these three times per call; calls that overlap in time do
not see each other's not-yet-stored chunks.

- `trace_schedule`: calls one after another in trace order (arrival order for open-loop traces).
  For a task-ordered file that is a pool of one.
- `closed_loop_schedule`: the driver's closed loop played in virtual time for `pool` slots, with a
  simple service-time model standing in for the server (the driver pool's rules: slots take
  root tasks in trace order; a call waits for its task's previous call, its `after` calls and its
  gap; sub-agents start when their spawning call ends and take no slot).
- a recorded run's times (`t_send`, `t_first_token`, `t_end` of its calls): read at the edge by
  `replay.model.run_order.read_run_schedule`.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from replay.errors import ConfigError
from replay.model.service import EngineQueue, ServiceModel, StepRoofline
from replay.trace.model import Call, CallRef, Trace

__all__ = [
    "ORDERS",
    "EngineQueue",
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


def _open_loop(trace: Trace) -> bool:
    return bool(trace.calls) and all(c.at_s is not None for c in trace.calls)


def trace_order(trace: Trace) -> list[CallRef]:
    """Calls in trace order (by arrival time, ties in file order, when every call has `at_s`)."""
    if _open_loop(trace):
        ranked = sorted(range(len(trace.calls)), key=lambda i: (trace.calls[i].at_s, i))
        return [trace.calls[i].ref for i in ranked]
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


def closed_loop_schedule(
    trace: Trace,
    pool: int,
    *,
    service: ServiceModel | None = None,
    gap_scale: float = 1.0,
    jitter: float = 0.0,
    rng: np.random.Generator | None = None,
    queue: EngineQueue | None = None,
) -> Schedule:
    """Times of a closed-loop replay of `trace` with `pool` slots, in virtual time.

    Ties in send time keep a deterministic order (the sequence in which calls became ready).
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
    if _open_loop(trace):
        return _open_loop_schedule(trace, service, gap_scale)
    tasks = trace.tasks
    children: dict[CallRef, list[str]] = {}
    for tid, calls in tasks.items():
        if calls[0].parent is not None:
            children.setdefault(calls[0].parent, []).append(tid)
    successor = {
        a.ref: b for calls in tasks.values() for a, b in zip(calls, calls[1:], strict=False)
    }
    waiting_on: dict[CallRef, list[Call]] = {}  # parked calls, keyed by one unfinished dependency
    parked_at: dict[CallRef, tuple[int, float]] = {}  # parked call -> (slot, dependency end)
    ended: dict[CallRef, float] = {}
    roots = iter(trace.root_task_ids)
    heap: list[tuple[float, int, int, Call, int]] = []  # (time, seq, kind, call, slot)
    seq = 0
    send, end = 0, 1
    refs: list[CallRef] = []
    times: list[tuple[float, float, float]] = []
    in_flight: dict[CallRef, int] = {}  # admitted, not ended: context tokens (the decode batch)
    waiting: deque[tuple[Call, int]] = deque()  # sent, not admitted (only with a queue)
    held = 0  # device tokens the admitted calls reserve
    prefill_free = 0.0  # when the prefill compute is next free

    def admit(call: Call, slot: int, t: float) -> None:
        nonlocal seq, held, prefill_free
        new = _new_tokens(trace, call)
        start = t
        if queue is not None:
            new = min(call.prompt_len, queue.prefill_tokens.get(call.ref, new))
            start = max(t, prefill_free)
            held += call.prompt_len + call.output_len
        stretch = 1.0 + jitter * float(rng.uniform(-1.0, 1.0)) if jitter and rng else 1.0
        t_pre = start + stretch * service.prefill_s(new, call.prompt_len - new)
        if queue is not None:
            prefill_free = t_pre
        t_end = t_pre + stretch * service.decode_s(
            call.output_len, call.prompt_len, tuple(in_flight.values())
        )
        refs.append(call.ref)
        times.append((t, t_pre, t_end))
        in_flight[call.ref] = call.prompt_len
        seq += 1
        heapq.heappush(heap, (t_end, seq, end, call, slot))

    def admit_waiting(t: float) -> None:
        assert queue is not None
        while waiting:
            call, slot = waiting[0]
            room = queue.device_tokens
            if room and in_flight and held + call.prompt_len + call.output_len > room:
                return  # first come first served: the head waits for device space
            waiting.popleft()
            admit(call, slot, t)

    def ready(call: Call, dep_end: float, slot: int) -> None:
        nonlocal seq
        for ref in call.after:
            if ref not in ended:
                waiting_on.setdefault(ref, []).append(call)
                parked_at[call.ref] = (slot, dep_end)
                return
            dep_end = max(dep_end, ended[ref])
        seq += 1
        heapq.heappush(heap, (dep_end + call.gap_s * gap_scale, seq, send, call, slot))

    def start_next_root(slot: int, t: float) -> None:
        task = next(roots, None)
        if task is not None:
            ready(tasks[task][0], t, slot)

    for slot in range(pool):
        start_next_root(slot, 0.0)
    while heap:
        t, _, kind, call, slot = heapq.heappop(heap)
        if kind == send:
            if queue is None:
                admit(call, slot, t)
            else:
                waiting.append((call, slot))
                admit_waiting(t)
            continue
        in_flight.pop(call.ref, None)
        if queue is not None:
            held -= call.prompt_len + call.output_len
        ended[call.ref] = t
        nxt = successor.get(call.ref)
        if nxt is not None:
            ready(nxt, t, slot)
        elif tasks[call.task][0].parent is None:
            start_next_root(slot, t + (call.tail_gap_s or 0.0) * gap_scale)
        for child in children.get(call.ref, ()):
            ready(tasks[child][0], t, slot)
        for parked in waiting_on.pop(call.ref, ()):
            p_slot, p_dep = parked_at.pop(parked.ref)
            ready(parked, p_dep, p_slot)
        if queue is not None:
            admit_waiting(t)
    grid = np.array(times, np.float64).reshape(-1, 3)
    return Schedule(refs, grid[:, 0], grid[:, 1], grid[:, 2])


def _open_loop_schedule(trace: Trace, service: ServiceModel, gap_scale: float) -> Schedule:
    """Calls arrive at their `at_s` whatever the server does; service times as in the closed loop."""
    refs = trace_order(trace)
    calls = [trace.call(r) for r in refs]
    t0 = np.array([c.at_s for c in calls], np.float64) * gap_scale
    new = [_new_tokens(trace, c) for c in calls]
    pre = np.array(
        [service.prefill_s(n, c.prompt_len - n) for n, c in zip(new, calls, strict=True)],
        np.float64,
    )
    dec = np.array([service.decode_s(c.output_len, c.prompt_len) for c in calls], np.float64)
    return Schedule(refs, t0, t0 + pre, t0 + pre + dec)


def closed_loop_order(
    trace: Trace,
    pool: int,
    *,
    service: ServiceModel | None = None,
    gap_scale: float = 1.0,
) -> list[CallRef]:
    """Send order of `closed_loop_schedule`."""
    return closed_loop_schedule(trace, pool, service=service, gap_scale=gap_scale).refs
