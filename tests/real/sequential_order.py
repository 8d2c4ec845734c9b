"""The order in which `replay run --max-inflight 1 --gap-scale 0` sends a trace's calls, worked out
before the run, so a stack-distance prediction can be registered before the engine sees a call.

With one request in flight and no think time, the order does not depend on how fast the server is:
calls queue on the driver's semaphore first-in first-out. When a call ends, its own task's next
call joins the queue at once (the same coroutine goes on without yielding; a root task that is
done takes the next root task in its slot), then the tasks woken by its end join in the order
they were woken: a call waiting for it as a join (`after`) first, then the sub-agents it spawns.
tests/test_trace_scale_order.py checks this against the real driver on the simulator.
"""

from __future__ import annotations

from collections import deque

from replay.trace.model import CallRef, Trace

__all__ = ["one_in_flight_order"]


def one_in_flight_order(trace: Trace, pool: int) -> list[CallRef]:
    """Call refs in send order for a closed-loop replay with `pool` slots, one call in flight."""
    children: dict[CallRef, list[str]] = {}
    for tid, calls in trace.tasks.items():
        if calls[0].parent is not None:
            children.setdefault(calls[0].parent, []).append(tid)
    roots = iter(trace.root_task_ids)
    slot_of: dict[str, bool] = {}  # task -> whether it runs in a slot (a root task)
    queue: deque[CallRef] = deque()
    ended: set[CallRef] = set()
    blocked: dict[CallRef, CallRef] = {}  # a join being waited for -> the call waiting on it

    def reach(ref: CallRef) -> None:
        """A task's coroutine arrives at call `ref`: waits for its joins, then queues."""
        for dep in trace.call(ref).after:
            if dep not in ended:
                blocked[dep] = ref
                return
        queue.append(ref)

    def next_call(ref: CallRef) -> None:
        task, i = ref
        if i + 1 < len(trace.tasks[task]):
            reach((task, i + 1))
        elif slot_of[task]:
            start_root()

    def start_root() -> None:
        t = next(roots, None)
        if t is not None:
            slot_of[t] = True
            reach((t, 0))

    for _ in range(pool):
        start_root()
    order: list[CallRef] = []
    while queue:
        ref = queue.popleft()
        order.append(ref)
        ended.add(ref)
        next_call(ref)
        woken: list[CallRef] = []
        if ref in blocked:
            woken.append(blocked.pop(ref))
        for child in children.get(ref, ()):
            slot_of[child] = False
            woken.append((child, 0))
        for w in woken:
            reach(w)
    assert len(order) == len(trace), "every call is sent once"
    return order
