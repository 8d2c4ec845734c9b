"""Validation of a trace's lines: the header, each call against its task so far, and the
whole-trace dependency graph. Each rule raises `TraceError(file, line, field, why)`."""

from __future__ import annotations

import math

import numpy as np

from replay.errors import TraceError
from replay.trace.fields import Line, kind
from replay.trace.model import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MAX_VOCAB_SIZE,
    Call,
    CallRef,
    TraceHeader,
)

__all__ = [
    "MAX_CALL_TOKENS",
    "EMPTY_PROMPT",
    "too_long",
    "TaskState",
    "check_call",
    "check_graph",
    "check_header",
]

_HEADER_KEYS = {
    "format",
    "version",
    "tokens",
    "block_size",
    "vocab_size",
    "model",
    "source",
    "meta",
}
_CALL_KEYS = {
    "task",
    "call",
    "gap_s",
    "keep",
    "append",
    "prompt_len",
    "output_len",
    "output",
    "after",
    "at_s",
    "tail_gap_s",
    "recorded",
    "ns",
    "parent",
}


# One call's prompt or output above this is a broken trace, refused before anything is allocated:
# 2**24 tokens is above the longest context any model offers (10M), and 128 MiB of int64 ids.
MAX_CALL_TOKENS = 1 << 24
EMPTY_PROMPT = "is 0: a call sends at least one prompt token"


def too_long(n: int) -> str | None:
    """Why a call's prompt or output of `n` tokens is refused (None when it is not): the
    reader's words, which the importers use under their sources' own field names."""
    if n <= MAX_CALL_TOKENS:
        return None
    return (
        f"{n:,} tokens is past any model's context ({MAX_CALL_TOKENS:,} at most): a unit or "
        "field mix-up?"
    )


def check_header(obj: dict, file: str) -> TraceHeader:
    ln = Line(obj, file, 1)
    fmt = obj.get("format")
    if fmt is None:
        raise ln.fail(
            "format",
            f'missing header: the first line must be {{"format": "{FORMAT_NAME}", "version": '
            f"{FORMAT_VERSION}, ...}}; a WEKA or Mooncake trace is converted first: replay trace "
            "import --from weka|mooncake FILE -o OUT.jsonl.gz",
        )
    if fmt != FORMAT_NAME:
        raise ln.fail("format", f"unknown format {fmt!r}; expected {FORMAT_NAME!r}")
    version = ln.int_("version", minimum=None)
    if version != FORMAT_VERSION:
        raise ln.fail(
            "version", f"unsupported version {version}; this reader knows {FORMAT_VERSION}"
        )
    unknown = sorted(set(obj) - _HEADER_KEYS)
    if unknown:
        raise ln.fail(unknown[0], f"unknown header field; known: {', '.join(sorted(_HEADER_KEYS))}")
    tokens = obj.get("tokens", "ids")
    if tokens not in ("ids", "blocks"):
        raise ln.fail("tokens", f'must be "ids" or "blocks", got {tokens!r}')
    vocab = ln.int_("vocab_size", minimum=2)
    if vocab is not None and vocab > MAX_VOCAB_SIZE:
        raise ln.fail(
            "vocab_size",
            f"must be at most 2^31 = {MAX_VOCAB_SIZE:,} (ids are 32-bit), got {vocab:,}",
        )
    block_size = ln.int_("block_size", minimum=1, required=tokens == "blocks")
    if block_size is not None and block_size > MAX_CALL_TOKENS:
        # a block's tokens are made whole: a larger one asked for gigabytes to expand one id
        raise ln.fail(
            "block_size",
            f"must be at most {MAX_CALL_TOKENS:,} tokens (a call's limit), got {block_size:,}",
        )
    meta = obj.get("meta")
    meta = {} if meta is None else meta
    if not isinstance(meta, dict):
        raise ln.fail("meta", f"must be an object, got {kind(meta)}")
    return TraceHeader(
        tokens=tokens,
        vocab_size=int(vocab or 0),
        block_size=block_size,
        model=ln.str_("model", required=False),
        source=ln.str_("source", required=False),
        meta=meta,
    )


class TaskState:
    """What validation remembers about a task: its next index and previous context length."""

    __slots__ = ("next_index", "ctx_len", "last_line", "ns")

    def __init__(self) -> None:
        self.next_index = 0
        self.ns: str | None = None  # blocks traces: the namespace the kept blocks were made in
        self.ctx_len = 0  # tokens (ids traces) or blocks (blocks traces) a `keep` may refer to
        self.last_line = 0


def check_call(
    obj: dict, h: TraceHeader, file: str, lineno: int, tasks: dict[str, TaskState]
) -> Call:
    """One call line -> `Call`: each field read and checked, then checked against the task so far
    (`tasks` carries each task's next index and context length from line to line)."""
    ln = Line(obj, file, lineno)
    unknown = sorted(set(obj) - _CALL_KEYS)
    if unknown:
        raise ln.fail(unknown[0], f"unknown call field; known: {', '.join(sorted(_CALL_KEYS))}")
    task = ln.str_("task")
    assert task is not None
    index = int(ln.int_("call") or 0)
    st = tasks.get(task)
    if st is None:
        st = tasks[task] = TaskState()
    _check_index(ln, task, index, st)
    gap_s = ln.seconds("gap_s")
    keep = int(ln.int_("keep") or 0)
    if keep > st.ctx_len:
        unit = "tokens" if h.tokens == "ids" else "blocks"
        raise ln.fail(
            "keep",
            f"keeps {keep} {unit} but the task's previous context has only {st.ctx_len}",
        )
    blocks = h.tokens == "blocks"
    if blocks:
        append = ln.ints("append", np.int64, None)
    else:
        append = ln.ints("append", np.int32, h.vocab_size)
    output = ln.ints("output", np.int32, h.vocab_size, required=False)
    prompt_len = _prompt_len(ln, h, keep, len(append))
    if prompt_len == 0:  # every server refuses it: the run would fail the call, not this file
        raise ln.fail("prompt_len", EMPTY_PROMPT)
    output_len = ln.int_("output_len", required=output is None)
    if output is not None:
        if output_len is None:
            output_len = len(output)
        elif output_len != len(output):
            raise ln.fail("output_len", f"is {output_len} but output has {len(output)} ids")
    for field, n in (("prompt_len", prompt_len), ("output_len", output_len)):
        why = None if n is None else too_long(int(n))
        if why is not None:
            raise ln.fail(field, why)
    ns = ln.str_("ns", required=False)
    if blocks and keep and (ns or task) != st.ns:
        # a kept block is the previous prompt's tokens, made in its namespace: in another one
        # the same id stands for other tokens, so the prompt would not be what the spec says
        raise ln.fail(
            "ns",
            f"{ns or task!r} differs from the task's previous call's {st.ns!r} while it keeps "
            f"{keep} blocks; keep 0 to start over in another namespace",
        )
    after = _after(ln, obj, task)
    parent = _parent(ln, obj, task, index)
    recorded = _recorded(ln, obj)
    # Previous context for the next call: prompt + output tokens, or the prompt's blocks.
    st.ctx_len = keep + len(append) if blocks else int(prompt_len) + int(output_len or 0)
    st.next_index = index + 1
    st.last_line = lineno
    st.ns = ns or task
    return Call(
        task=task,
        index=index,
        gap_s=float(gap_s or 0.0),
        keep=keep,
        append=append,
        prompt_len=int(prompt_len),
        output_len=int(output_len or 0),
        output=output,
        after=after,
        at_s=ln.seconds("at_s", required=False),
        tail_gap_s=ln.seconds("tail_gap_s", required=False),
        recorded=recorded,
        ns=ns,
        parent=parent,
        line=lineno,
    )


def _check_index(ln: Line, task: str, index: int, st: TaskState) -> None:
    """A task's calls come in order, each index once."""
    if index != st.next_index:
        why = "duplicate" if index < st.next_index else "out-of-order"
        raise ln.fail(
            "call", f"{why} call index {index} for task {task!r}; expected {st.next_index}"
        )


def _prompt_len(ln: Line, h: TraceHeader, keep: int, n_append: int) -> int:
    """`prompt_len`, checked against the kept and appended ids (or blocks, which it must fill)."""
    blocks = h.tokens == "blocks"
    prompt_len = ln.int_("prompt_len", required=blocks)
    if blocks:
        n_blocks = keep + n_append
        bs = int(h.block_size or 1)
        assert prompt_len is not None
        # The last block may be partial (covered) or absent (an unhashed tail shorter than a block).
        if not (n_blocks - 1) * bs < prompt_len < (n_blocks + 1) * bs:
            raise ln.fail(
                "prompt_len",
                f"{prompt_len} tokens do not fit {n_blocks} blocks of {bs} "
                f"(need {max(0, (n_blocks - 1) * bs + 1)}..{(n_blocks + 1) * bs - 1})",
            )
    else:
        actual = keep + n_append
        if prompt_len is None:
            prompt_len = actual
        elif prompt_len != actual:
            raise ln.fail("prompt_len", f"is {prompt_len} but keep + len(append) = {actual}")
    return prompt_len


def _after(ln: Line, obj: dict, task: str) -> tuple[CallRef, ...]:
    """The calls of other tasks this call waits for."""
    after_raw = obj.get("after")
    after: tuple[CallRef, ...] = ()
    if after_raw is not None:
        if not isinstance(after_raw, list):
            raise ln.fail("after", f"must be an array of [task, call_index], got {kind(after_raw)}")
        after = tuple(ln.ref(v, "after") for v in after_raw)
        for ref in after:
            if ref[0] == task:
                raise ln.fail("after", f"names its own task {task!r}; list calls of other tasks")
    return after


def _parent(ln: Line, obj: dict, task: str, index: int) -> CallRef | None:
    """The call that spawned this task (sub-agents), named on the task's first call only."""
    parent = None
    if obj.get("parent") is not None:
        parent = ln.ref(obj["parent"], "parent")
        if index != 0:
            raise ln.fail("parent", "only a task's first call (call 0) may name a parent")
        if parent[0] == task:
            raise ln.fail("parent", "a task cannot be its own parent")
    return parent


def _recorded(ln: Line, obj: dict) -> dict | None:
    """What the recording measured: an object of finite numbers or nulls."""
    recorded = obj.get("recorded")
    if recorded is not None:
        if not isinstance(recorded, dict):
            raise ln.fail("recorded", f"must be an object, got {kind(recorded)}")
        for k, v in recorded.items():
            if v is not None and (
                isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v)
            ):
                raise ln.fail(f"recorded.{k}", f"must be a finite number or null, got {v!r:.40}")
    return recorded


def check_graph(calls: list[Call], file: str) -> None:
    """Whole-trace checks: known dependencies, parents, tail gaps only on last calls, no cycles.

    The dependency graph has an edge from each call to the next of its task, from every `after`
    call to its dependant, and from a parent call to the first call of the task it spawned.
    """
    by_ref = {c.ref: c for c in calls}
    if len(by_ref) != len(calls):  # the reader refuses these line by line; an importer may not
        first: dict[CallRef, Call] = {}
        for c in calls:
            was = first.setdefault(c.ref, c)
            if was is not c:
                raise TraceError(
                    file, c.line or None, "call",
                    f"task {c.task!r} has call {c.index} twice; each task's calls must be "
                    "numbered once",
                )  # fmt: skip
    last = {}
    for c in calls:
        last[c.task] = c.index
    for c in calls:
        for ref in c.after:
            if ref not in by_ref:
                raise TraceError(file, c.line, "after", f"depends on unknown call {list(ref)}")
        if c.parent is not None and c.parent not in by_ref:
            raise TraceError(file, c.line, "parent", f"names unknown call {list(c.parent)}")
        if c.tail_gap_s is not None and c.index != last[c.task]:
            raise TraceError(file, c.line, "tail_gap_s", "only a task's last call may have one")
    # Kahn's algorithm over the implicit graph; O(calls + edges).
    indeg = {c.ref: 0 for c in calls}
    succ: dict[CallRef, list[CallRef]] = {}
    for c in calls:
        preds = list(c.after)
        if c.index > 0:
            preds.append((c.task, c.index - 1))
        elif c.parent is not None:
            preds.append(c.parent)
        for p in preds:
            succ.setdefault(p, []).append(c.ref)
            indeg[c.ref] += 1
    ready = [r for r, d in indeg.items() if d == 0]
    seen = 0
    while ready:
        r = ready.pop()
        seen += 1
        for s in succ.get(r, ()):
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    if seen != len(calls):
        stuck = min((by_ref[r] for r, d in indeg.items() if d > 0), key=lambda c: c.line)
        raise TraceError(
            file, stuck.line, "after", f"dependency cycle through call {list(stuck.ref)}"
        )
