"""Cutting a trace down (`slice_trace`) and pooling several (`merge_traces`), dependencies kept valid.

Slicing rules, so a sliced trace always validates and means what it says:

- Task selection (`tasks`, `task_ids`) keeps the chosen tasks and every sub-agent they spawn,
  transitively. A chosen sub-agent whose parent task is not kept is *re-rooted*: it loses its
  `parent` and becomes a root task a pool slot takes.
- A per-task call window (`start`, `stop`; `max_calls_per_task` is `stop`) keeps calls
  start..stop-1 of every task, renumbered from 0. The first kept call is rewritten to send its
  whole prompt (nothing earlier is left to keep). A sub-agent spawned by a call that was cut is
  dropped with its own sub-agents: it belonged to the part of the story that is gone.
- An `after` (join) naming a call that is no longer in the trace is removed; the call then waits
  only for what is left.

Renumbered or renamed calls of a token-id trace get their outputs written out, so the stand-in
ids (derived from the task id and call index) stay the tokens they were.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from replay.errors import ConfigError
from replay.trace.model import Call, CallRef, Trace

__all__ = ["slice_trace", "merge_traces"]


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


def slice_trace(
    trace: Trace,
    tasks: int | None = None,
    task_ids: list[str] | None = None,
    start: int = 0,
    stop: int | None = None,
) -> Trace:
    """The part of `trace` chosen by root-task count or task ids and a per-task call window."""
    if tasks is not None and task_ids is not None:
        raise ConfigError("slice", "--tasks", "give --tasks or --task-ids, not both")
    if start < 0 or (stop is not None and stop <= start):
        raise ConfigError("slice", "--window", f"need 0 <= START < END, got {start}:{stop}")
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

    # per-task call window; then drop tasks spawned by a cut call (and theirs), to a fixed point
    window: dict[str, list[Call]] = {}
    for t, cs in trace.tasks.items():
        if t in kept_tasks and cs[start:stop]:
            window[t] = cs[start:stop]
    while True:
        kept_refs = {c.ref for cs in window.values() for c in cs}
        gone = [
            t
            for t in window
            if (spawn := trace.tasks[t][0].parent) is not None
            and spawn[0] in kept_tasks
            and spawn not in kept_refs
        ]
        if not gone:
            break
        for t in _with_descendants(trace, gone):
            window.pop(t, None)
    if not window:
        raise ConfigError("slice", None, "nothing left: the selection keeps no call")
    kept_refs = {c.ref for cs in window.values() for c in cs}

    def moved(ref: CallRef) -> CallRef:
        return (ref[0], ref[1] - start)

    calls: list[Call] = []
    for c in trace.calls:
        if c.ref not in kept_refs:
            continue
        new = _whole_prompt(trace, c) if start and c.index == start else c
        spawn = trace.tasks[c.task][0].parent
        parent = spawn if c.index == start and spawn in kept_refs else None
        if start and trace.header.tokens == "ids" and new.output is None:
            new = replace(new, output=trace.output_ids(c))
        calls.append(
            replace(
                new,
                index=c.index - start,
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
