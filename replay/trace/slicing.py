"""Cutting a trace down (`slice_trace`) and pooling several (`merge_traces`), dependencies kept valid.

Slicing rules, so a sliced trace always validates and means what it says:

- Task selection (`tasks`, `task_ids`) keeps the chosen tasks and every sub-agent they spawn,
  transitively. A chosen sub-agent whose parent task is not kept is *re-rooted*: it loses its
  `parent` and becomes a root task a pool slot takes.
- A per-task call window (`start`, `stop`; `max_calls_per_task` is `stop`) keeps calls
  start..stop-1 of every task, renumbered from 0. The first kept call is rewritten to send its
  whole prompt (nothing earlier is left to keep). A sub-agent spawned by a call that was cut is
  dropped with its own sub-agents: it belonged to the part of the story that is gone.
- A time window (`window_s`) keeps the calls whose time on the trace's own timeline
  (`timeline_s`) lies in [START, END), renumbered from 0 within each task, the first kept call of
  a task sending its whole prompt. Every call that ran in the window stays, so a sub-agent whose
  spawning call was before the window is re-rooted rather than dropped. A closed-loop call that
  lost a dependency gets the gap that puts it where it was: the sliced trace's own timeline is
  the original's from the first kept call on (open loop: arrival times are kept as they are).
- An `after` (join) naming a call that is no longer in the trace is removed; the call then waits
  only for what is left.

Renumbered or renamed calls of a token-id trace get their outputs written out, so the stand-in
ids (derived from the task id and call index) stay the tokens they were.
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import replace

import numpy as np

from replay.errors import ConfigError
from replay.trace.model import Call, CallRef, Trace
from replay.trace.schedule import ClosedLoop, Ready, arrivals, is_open_loop

__all__ = ["slice_trace", "merge_traces", "timeline_s"]


def _children(trace: Trace) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for t, cs in trace.tasks.items():
        if cs[0].parent is not None:
            out.setdefault(cs[0].parent[0], []).append(t)
    return out


def _with_descendants(trace: Trace, chosen: list[str]) -> set[str]:
    kids = _children(trace)
    keep: set[str] = set()
    todo = list(chosen)
    while todo:
        t = todo.pop()
        if t not in keep:
            keep.add(t)
            todo.extend(kids.get(t, []))
    return keep


def _block_lists(trace: Trace, task: str) -> list[np.ndarray]:
    """Each call's full block-id list (blocks traces), from the deltas."""
    prev = np.empty(0, np.int64)
    out = []
    for c in trace.tasks[task]:
        prev = np.concatenate([prev[: c.keep], c.append])
        out.append(prev)
    return out


def _whole_prompt(trace: Trace, c: Call) -> Call:
    """`c` rewritten to send its whole prompt without keeping anything."""
    if trace.header.tokens == "ids":
        append = trace.prompt(c)
    else:
        append = _block_lists(trace, c.task)[c.index]
    return replace(c, keep=0, append=append)


def timeline_s(trace: Trace) -> dict[CallRef, float]:
    """Each call's time, in seconds, on the trace's own timeline: what `--window` counts in.

    Open loop: its arrival, after the first arrival. Closed loop: when it is sent under the
    replay's scheduling rules with a slot for every root task and calls that take no time, so
    only the recorded gaps and the dependencies (previous call, spawning call, joins) place it:
    the trace's timing without any server's. Non-decreasing within each task.
    """
    if is_open_loop(trace):
        return {c.ref: at_s for c, at_s in arrivals(trace)}
    rules = ClosedLoop(trace, max(1, len(trace.root_task_ids)))
    heap: list[tuple[float, int, Ready]] = []
    out: dict[CallRef, float] = {}
    order = itertools.count()  # breaks ties: Ready does not order
    todo = rules.start(0.0)
    while True:
        for r in todo:
            heapq.heappush(heap, (r.t_s, next(order), r))
        if not heap:
            break
        t_s, _, r = heapq.heappop(heap)
        if r.call is None:
            todo = rules.free(r.slot, t_s)
            continue
        out[r.call.ref] = t_s
        todo = rules.ended(r.call.ref, t_s, t_s)
    if len(out) != len(trace):  # a join cycle; the reader refuses those, a hand-built trace may not
        raise ConfigError("slice", "--window", f"calls that can never be sent: {rules.explain()}")
    return out


def _task_windows(
    trace: Trace, kept_tasks: set[str], start: int, stop: int | None
) -> dict[str, range]:
    """Calls start..stop-1 of each kept task; then drop the tasks spawned by a cut call (and
    theirs), to a fixed point."""
    window: dict[str, range] = {}
    for t, cs in trace.tasks.items():
        r = range(len(cs))[start:stop]
        if t in kept_tasks and r:
            window[t] = r
    while True:
        kept_refs = {(t, i) for t, r in window.items() for i in r}
        gone = [
            t
            for t in window
            if (spawn := trace.tasks[t][0].parent) is not None
            and spawn[0] in kept_tasks
            and spawn not in kept_refs
        ]
        if not gone:
            return window
        for t in _with_descendants(trace, gone):
            window.pop(t, None)


def _time_windows(
    trace: Trace, kept_tasks: set[str], times_s: dict[CallRef, float], lo_s: float, hi_s: float
) -> dict[str, range]:
    """The calls of each kept task with a time in [lo_s, hi_s): a run of consecutive indices,
    as times do not decrease within a task."""
    window: dict[str, range] = {}
    for t in kept_tasks:
        inside = [c.index for c in trace.tasks[t] if lo_s <= times_s[c.ref] < hi_s]
        if inside:
            window[t] = range(inside[0], inside[-1] + 1)
    return window


def _gap_kept_in_place(
    trace: Trace, c: Call, kept: set[CallRef], times_s: dict[CallRef, float], t0_s: float
) -> float:
    """The gap that sends closed-loop call `c` at its original time minus `t0_s` once the
    dependencies outside `kept` are gone (its own gap when the latest one is still there)."""
    deps = list(c.after)
    if c.index > 0:
        deps.append((c.task, c.index - 1))
    elif c.parent is not None:
        deps.append(c.parent)
    was_s = max((times_s[d] for d in deps), default=0.0)
    now_s = max([t0_s, *(times_s[d] for d in deps if d in kept)])
    if now_s == was_s:
        return c.gap_s
    return max(0.0, times_s[c.ref] - now_s)


def slice_trace(
    trace: Trace,
    tasks: int | None = None,
    task_ids: list[str] | None = None,
    start: int = 0,
    stop: int | None = None,
    window_s: tuple[float, float | None] | None = None,
) -> Trace:
    """The part of `trace` chosen by root-task count or task ids, and by a per-task call window
    (`start`, `stop`) or a time window (`window_s`, seconds on `timeline_s`; END None: no end)."""
    if tasks is not None and task_ids is not None:
        raise ConfigError("slice", "--tasks", "give --tasks or --task-ids, not both")
    if start < 0 or (stop is not None and stop <= start):
        raise ConfigError("slice", "--window-calls", f"need 0 <= START < END, got {start}:{stop}")
    if window_s is not None:
        lo_s, hi_s = window_s[0], math.inf if window_s[1] is None else window_s[1]
        if (start, stop) != (0, None):
            raise ConfigError("slice", "--window", "give a time window or a call window, not both")
        if not (0 <= lo_s < hi_s) or math.isnan(hi_s):
            raise ConfigError("slice", "--window", f"need 0 <= START < END seconds, got {window_s}")
    if task_ids is not None:
        missing = [t for t in task_ids if t not in trace.tasks]
        if missing:
            raise ConfigError("slice", "--task-ids", f"not in the trace: {', '.join(missing)}")
        chosen = list(task_ids)
    elif tasks is not None:
        if tasks < 1:
            raise ConfigError("slice", "--tasks", f"must be >= 1, got {tasks}")
        chosen = trace.root_task_ids[:tasks]
    else:
        chosen = trace.task_ids
    kept_tasks = _with_descendants(trace, chosen)

    times_s: dict[CallRef, float] = {}
    if window_s is None:
        window = _task_windows(trace, kept_tasks, start, stop)
    else:
        times_s = timeline_s(trace)
        window = _time_windows(trace, kept_tasks, times_s, lo_s, hi_s)
    if not window:
        raise ConfigError("slice", None, "nothing left: the selection keeps no call")
    kept_refs = {(t, i) for t, r in window.items() for i in r}
    t0_s = min((times_s[ref] for ref in kept_refs), default=0.0) if times_s else 0.0
    retime = window_s is not None and not is_open_loop(trace)  # open loop: at_s places calls

    def moved(ref: CallRef) -> CallRef:
        return (ref[0], ref[1] - window[ref[0]].start)

    calls: list[Call] = []
    for c in trace.calls:
        if c.ref not in kept_refs:
            continue
        first = window[c.task].start
        new = _whole_prompt(trace, c) if first and c.index == first else c
        spawn = trace.tasks[c.task][0].parent
        parent = spawn if c.index == first and spawn in kept_refs else None
        if first and new.output is None:  # stand-ins are keyed by the index renumbered here
            new = replace(new, output=trace.output_ids(c))
        if retime:
            new = replace(new, gap_s=_gap_kept_in_place(trace, c, kept_refs, times_s, t0_s))
        calls.append(
            replace(
                new,
                index=c.index - first,
                parent=None if parent is None else moved(parent),
                after=tuple(moved(r) for r in c.after if r in kept_refs),
            )
        )
    return Trace(trace.header, calls)


def _renamed(trace: Trace, c: Call, prefix: str) -> Call:
    """`c` with its task (and every reference, and its namespace) under `prefix`."""
    if not prefix:
        return c

    def ren(ref: CallRef) -> CallRef:
        return (prefix + ref[0], ref[1])

    extra: dict = {}
    if trace.header.tokens == "ids" and c.output is None:
        extra["output"] = trace.output_ids(c)  # stand-ins derive from the task id
    else:
        extra["ns"] = prefix + (c.ns or c.task)
    return replace(
        c,
        task=prefix + c.task,
        parent=None if c.parent is None else ren(c.parent),
        after=tuple(ren(r) for r in c.after),
        **extra,
    )


def merge_traces(traces: list[Trace], names: list[str]) -> Trace:
    """Tasks of several traces in one pool, in input order; ids made unique where they clash.

    When two inputs share a task id (or a block namespace), every task of the second and later
    input whose ids meet earlier ones is renamed `NAME/ID`, with NAME the input's name (its file
    stem; `NAME#POSITION` when two inputs share a name).
    """
    if not traces:
        raise ConfigError("merge", None, "no input traces")
    h0 = traces[0].header
    for tr, name in zip(traces[1:], names[1:], strict=True):
        h = tr.header
        for field in ("tokens", "vocab_size", "block_size"):
            if getattr(h, field) != getattr(h0, field):
                raise ConfigError(
                    "merge",
                    field,
                    f"{name} has {getattr(h, field)}, {names[0]} has {getattr(h0, field)}; "
                    "merge needs traces of one kind and vocabulary (re-import with --vocab-size, "
                    "or scale both: scaled traces are token-id traces)",
                )
    # a trace is either open loop or closed loop (replay.trace.schedule.is_open_loop)
    # pairs, not a dict by name: two inputs may share a name (a/x.jsonl, b/x.jsonl)
    kinds = [
        (n, tr.calls[0].at_s is not None) for n, tr in zip(names, traces, strict=True) if tr.calls
    ]
    if len({is_open for _, is_open in kinds}) > 1:
        open_ = [n for n, is_open in kinds if is_open]
        closed = [n for n, is_open in kinds if not is_open]
        raise ConfigError(
            "merge", "at_s", f"{', '.join(open_)} replay open loop (arrival times) and "
            f"{', '.join(closed)} closed loop: one trace cannot be both; merge each kind apart",
        )  # fmt: skip
    seen: set[str] = set()
    calls: list[Call] = []
    for i, (tr, name) in enumerate(zip(traces, names, strict=True)):
        own = set(tr.tasks) | {c.ns for c in tr.calls if c.ns}
        prefix = ""
        if own & seen:
            prefix = f"{name}/" if names.count(name) == 1 else f"{name}#{i + 1}/"
            own = {prefix + t for t in own}
            if own & seen:
                raise ConfigError("merge", "task", f"{name}: renamed ids still clash ({prefix}...)")
        seen |= own
        calls.extend(_renamed(tr, c, prefix) for c in tr.calls)
    meta = {"merged": names, "inputs": [tr.header.meta for tr in traces]}
    header = replace(h0, source="merge", meta=meta)
    return Trace(header, calls)
