"""Read, validate and write trace files (format v1, JSON Lines, optionally gzip).

Reading streams line by line and keeps, per task, only the length of its previous context, so
validation is O(calls) in time and memory proportional to the appended (unique) tokens. Every
problem raises `TraceError(file, line, field, why)`; nothing downstream sees a half-valid trace.
The writer emits keys in a fixed order, so read -> write -> read -> write is byte-identical.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import tempfile
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np
import orjson

from replay.errors import TraceError
from replay.trace.id_arrays import PLACEHOLDER, cut_ids
from replay.trace.model import FORMAT_NAME, FORMAT_VERSION, Call, CallRef, Trace, TraceHeader
from replay.trace.schedule import MAX_AT_S, MAX_SPAN_S

__all__ = [
    "read_trace",
    "read_header",
    "iter_calls",
    "write_trace",
    "trace_lines",
    "header_to_dict",
    "call_to_dict",
    "check_graph",
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
_GZIP_MAGIC = b"\x1f\x8b"


# ---------------------------------------------------------------------------------------- reading


# One call's prompt or output above this is a broken trace, refused before anything is allocated:
# 2**24 tokens is above the longest context any model offers (10M), and 128 MiB of int64 ids.
MAX_CALL_TOKENS = 1 << 24


def _open_lines(path: Path) -> IO[bytes]:
    """Binary line stream of a plain or gzip file (detected by magic bytes, not by name)."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - returned to the caller, closed by its `with`
    except OSError as e:
        raise TraceError(str(path), None, None, f"cannot open: {e.strerror or e}") from None
    magic = f.read(2)
    f.seek(0)
    if magic == _GZIP_MAGIC:
        return gzip.GzipFile(fileobj=f, mode="rb")  # type: ignore[return-value]
    return f


def _parse(raw: bytes, file: str, lineno: int) -> dict:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        # orjson rejects NaN/Infinity as invalid JSON; the stdlib accepts them, so a line that only
        # fails for that reason gets the precise field message from validation instead.
        try:
            obj = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise TraceError(file, lineno, None, f"invalid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise TraceError(file, lineno, None, f"line must be a JSON object, got {_kind(obj)}")
    return obj


def _parse_call(raw: bytes, file: str, lineno: int) -> dict:
    """`_parse` for a call line, its id arrays parsed by numpy (`id_arrays`): the same object,
    with arrays for lists, and the same errors (any doubt re-parses the line as it is)."""
    line, cut = raw, {}
    for key in ("append", "output"):
        got = cut_ids(line, key)
        if got is not None:
            line, cut[key] = got
    if not cut:
        return _parse(raw, file, lineno)
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return _parse(raw, file, lineno)
    if not isinstance(obj, dict) or any(obj.get(k) != PLACEHOLDER for k in cut):
        return _parse(raw, file, lineno)
    obj.update(cut)
    return obj


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


class _Line:
    """Typed field access for one parsed line, raising TraceError that names the field."""

    __slots__ = ("obj", "file", "lineno")

    def __init__(self, obj: dict, file: str, lineno: int):
        self.obj = obj
        self.file = file
        self.lineno = lineno

    def fail(self, field: str | None, why: str) -> TraceError:
        return TraceError(self.file, self.lineno, field, why)

    def has(self, key: str) -> bool:
        return self.obj.get(key) is not None

    def int_(self, key: str, minimum: int | None = 0, required: bool = True) -> int | None:
        v = self.obj.get(key)
        if v is None:
            if required:
                raise self.fail(key, "missing (required integer)")
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(key, f"must be an integer, got {_kind(v)}")
        if minimum is not None and v < minimum:
            raise self.fail(key, f"must be >= {minimum}, got {v}")
        return v

    def seconds(self, key: str, required: bool = True) -> float | None:
        v = self.obj.get(key)
        if v is None:
            if required:
                raise self.fail(key, "missing (required number of seconds)")
            return None
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise self.fail(key, f"must be a number of seconds, got {_kind(v)}")
        v = float(v)
        if not math.isfinite(v) or v < 0:
            raise self.fail(key, f"must be a finite number >= 0, got {v}")
        most_s = MAX_AT_S if key == "at_s" else MAX_SPAN_S
        if v > most_s:
            raise self.fail(
                key, f"{v:.3g} s is more than {most_s:.0e} s: seconds, not milliseconds?"
            )
        return v

    def str_(self, key: str, required: bool = True) -> str | None:
        v = self.obj.get(key)
        if v is None:
            if required:
                raise self.fail(key, "missing (required string)")
            return None
        if not isinstance(v, str) or not v:
            raise self.fail(key, f"must be a non-empty string, got {_kind(v)}")
        return v

    def ints(self, key: str, dtype: type, vocab: int | None, required: bool = True):
        v = self.obj.get(key)
        if v is None:
            if required:
                raise self.fail(key, "missing (required array of integers)")
            return None
        # an array: parsed from the line by `_parse_call` (ids >= 0, int64)
        arr = v if isinstance(v, np.ndarray) else self._list_ints(key, v)
        if arr is None:
            return np.empty(0, dtype)
        if vocab is not None:
            lo, hi = int(arr.min()), int(arr.max())
            if lo < 0 or hi >= vocab:
                bad = lo if lo < 0 else hi
                raise self.fail(key, f"token id {bad} outside vocab_size {vocab} (0..{vocab - 1})")
        elif arr.dtype.kind == "u":
            raise self.fail(key, "block ids must fit in a signed 64-bit integer")
        return arr.astype(dtype, copy=False)

    def _list_ints(self, key: str, v: Any) -> np.ndarray | None:
        """A parsed JSON list as an integer array (None when empty), or the field's error."""
        if not isinstance(v, list):
            raise self.fail(key, f"must be an array of integers, got {_kind(v)}")
        if not v:
            return None
        try:
            arr = np.array(v)
        except (OverflowError, ValueError):
            raise self.fail(key, "must be an array of 64-bit integers") from None
        if arr.ndim != 1 or arr.dtype.kind not in "iu":
            raise self.fail(key, "must be an array of integers")
        if bool in set(map(type, v)):  # numpy reads [1, true] as [1, 1]
            raise self.fail(key, "must be an array of integers, got true/false in it")
        return arr

    def ref(self, v: Any, key: str) -> CallRef:
        if (
            not isinstance(v, list)
            or len(v) != 2
            or not isinstance(v[0], str)
            or isinstance(v[1], bool)
            or not isinstance(v[1], int)
            or v[1] < 0
        ):
            raise self.fail(key, f"a call reference must be [task, call_index], got {v!r:.60}")
        return (v[0], v[1])


def _header(obj: dict, file: str) -> TraceHeader:
    ln = _Line(obj, file, 1)
    fmt = obj.get("format")
    if fmt is None:
        raise ln.fail(
            "format",
            f'missing header: the first line must be {{"format": "{FORMAT_NAME}", "version": '
            f"{FORMAT_VERSION}, ...}}",
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
    block_size = ln.int_("block_size", minimum=1, required=tokens == "blocks")
    meta = obj.get("meta")
    meta = {} if meta is None else meta
    if not isinstance(meta, dict):
        raise ln.fail("meta", f"must be an object, got {_kind(meta)}")
    return TraceHeader(
        tokens=tokens,
        vocab_size=int(vocab or 0),
        block_size=block_size,
        model=ln.str_("model", required=False),
        source=ln.str_("source", required=False),
        meta=meta,
    )


class _TaskState:
    """What validation remembers about a task: its next index and previous context length."""

    __slots__ = ("next_index", "ctx_len", "last_line")

    def __init__(self) -> None:
        self.next_index = 0
        self.ctx_len = 0  # tokens (ids traces) or blocks (blocks traces) a `keep` may refer to
        self.last_line = 0


def _call(obj: dict, h: TraceHeader, file: str, lineno: int, tasks: dict[str, _TaskState]) -> Call:
    """One call line -> `Call`: each field read and checked, then checked against the task so far
    (`tasks` carries each task's next index and context length from line to line)."""
    ln = _Line(obj, file, lineno)
    unknown = sorted(set(obj) - _CALL_KEYS)
    if unknown:
        raise ln.fail(unknown[0], f"unknown call field; known: {', '.join(sorted(_CALL_KEYS))}")
    task = ln.str_("task")
    assert task is not None
    index = int(ln.int_("call") or 0)
    st = tasks.get(task)
    if st is None:
        st = tasks[task] = _TaskState()
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
    output_len = ln.int_("output_len", required=output is None)
    if output is not None:
        if output_len is None:
            output_len = len(output)
        elif output_len != len(output):
            raise ln.fail("output_len", f"is {output_len} but output has {len(output)} ids")
    for field, n in (("prompt_len", prompt_len), ("output_len", output_len)):
        if n is not None and int(n) > MAX_CALL_TOKENS:
            raise ln.fail(
                field,
                f"{int(n):,} tokens is past any model's context ({MAX_CALL_TOKENS:,} at most): "
                "a unit or field mix-up?",
            )
    after = _after(ln, obj, task)
    parent = _parent(ln, obj, task, index)
    recorded = _recorded(ln, obj)
    # Previous context for the next call: prompt + output tokens, or the prompt's blocks.
    st.ctx_len = keep + len(append) if blocks else int(prompt_len) + int(output_len or 0)
    st.next_index = index + 1
    st.last_line = lineno
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
        ns=ln.str_("ns", required=False),
        parent=parent,
        line=lineno,
    )


def _check_index(ln: _Line, task: str, index: int, st: _TaskState) -> None:
    """A task's calls come in order, each index once."""
    if index != st.next_index:
        why = "duplicate" if index < st.next_index else "out-of-order"
        raise ln.fail(
            "call", f"{why} call index {index} for task {task!r}; expected {st.next_index}"
        )


def _prompt_len(ln: _Line, h: TraceHeader, keep: int, n_append: int) -> int:
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


def _after(ln: _Line, obj: dict, task: str) -> tuple[CallRef, ...]:
    """The calls of other tasks this call waits for."""
    after_raw = obj.get("after")
    after: tuple[CallRef, ...] = ()
    if after_raw is not None:
        if not isinstance(after_raw, list):
            raise ln.fail(
                "after", f"must be an array of [task, call_index], got {_kind(after_raw)}"
            )
        after = tuple(ln.ref(v, "after") for v in after_raw)
        for ref in after:
            if ref[0] == task:
                raise ln.fail("after", f"names its own task {task!r}; list calls of other tasks")
    return after


def _parent(ln: _Line, obj: dict, task: str, index: int) -> CallRef | None:
    """The call that spawned this task (sub-agents), named on the task's first call only."""
    parent = None
    if obj.get("parent") is not None:
        parent = ln.ref(obj["parent"], "parent")
        if index != 0:
            raise ln.fail("parent", "only a task's first call (call 0) may name a parent")
        if parent[0] == task:
            raise ln.fail("parent", "a task cannot be its own parent")
    return parent


def _recorded(ln: _Line, obj: dict) -> dict | None:
    """What the recording measured: an object of finite numbers or nulls."""
    recorded = obj.get("recorded")
    if recorded is not None:
        if not isinstance(recorded, dict):
            raise ln.fail("recorded", f"must be an object, got {_kind(recorded)}")
        for k, v in recorded.items():
            if v is not None and (
                isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v)
            ):
                raise ln.fail(f"recorded.{k}", f"must be a finite number or null, got {v!r:.40}")
    return recorded


def _lines(path: Path, file: str) -> Iterator[tuple[int, bytes]]:
    with _open_lines(path) as f:
        lineno = 0
        try:
            for raw in f:
                lineno += 1
                if raw and not raw.isspace():  # strip() would copy a long line
                    yield lineno, raw
        except (OSError, EOFError, zlib.error) as e:
            raise TraceError(file, lineno + 1, None, f"unreadable (corrupt gzip?): {e}") from None


def read_header(path: str | os.PathLike) -> TraceHeader:
    """The validated header of a trace file (reads only its first line)."""
    for header, _ in iter_calls(path):
        return header
    raise AssertionError("unreachable")  # iter_calls raises on an empty file


def iter_calls(path: str | os.PathLike) -> Iterator[tuple[TraceHeader, Call | None]]:
    """Stream `(header, call)` pairs, validating each line; the first item has `call=None`.

    Checks that need the whole file (dependencies, cycles, tail gaps) are done by `read_trace`.
    """
    p = Path(path)
    file = str(path)
    it = _lines(p, file)
    first = next(it, None)
    if first is None:
        raise TraceError(file, 1, None, "empty file: expected a header line and calls")
    lineno, raw = first
    header = _header(_parse(raw, file, lineno), file)
    yield header, None
    tasks: dict[str, _TaskState] = {}
    for lineno, raw in it:
        obj = _parse_call(raw, file, lineno)
        if "format" in obj and "task" not in obj:
            raise TraceError(
                file, lineno, "format", "a second header line; only line 1 is a header"
            )
        yield header, _call(obj, header, file, lineno, tasks)


def check_graph(calls: list[Call], file: str) -> None:
    """Whole-trace checks: known dependencies, parents, tail gaps only on last calls, no cycles.

    The dependency graph has an edge from each call to the next of its task, from every `after`
    call to its dependant, and from a parent call to the first call of the task it spawned.
    """
    by_ref = {c.ref: c for c in calls}
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


def read_trace(path: str | os.PathLike) -> Trace:
    """Read and fully validate a trace file (plain or gzip JSON Lines) into a `Trace`."""
    stream = iter_calls(path)
    header, _ = next(stream)
    calls = [call for _, call in stream if call is not None]
    check_graph(calls, str(path))
    return Trace(header, calls, path=str(path))


# ---------------------------------------------------------------------------------------- writing


def header_to_dict(h: TraceHeader) -> dict:
    """The header's JSON object, keys in the canonical order."""
    d: dict[str, Any] = {"format": h.format, "version": h.version, "tokens": h.tokens}
    if h.block_size is not None:
        d["block_size"] = h.block_size
    d["vocab_size"] = h.vocab_size
    for k in ("model", "source"):
        if getattr(h, k) is not None:
            d[k] = getattr(h, k)
    if h.meta:
        d["meta"] = h.meta
    return d


def call_to_dict(c: Call) -> dict:
    """A call's JSON object, keys in the canonical order; optional fields only when set."""
    d: dict[str, Any] = {"task": c.task, "call": c.index}
    if c.parent is not None:
        d["parent"] = list(c.parent)
    if c.after:
        d["after"] = [list(r) for r in c.after]
    if c.at_s is not None:
        d["at_s"] = c.at_s
    d["gap_s"] = c.gap_s
    d["keep"] = c.keep
    d["append"] = c.append
    d["prompt_len"] = c.prompt_len
    d["output_len"] = c.output_len
    if c.output is not None:
        d["output"] = c.output
    if c.tail_gap_s is not None:
        d["tail_gap_s"] = c.tail_gap_s
    if c.ns is not None:
        d["ns"] = c.ns
    if c.recorded is not None:
        d["recorded"] = c.recorded
    return d


_DUMP = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE


def trace_lines(header: TraceHeader, calls: Iterable[Call]) -> Iterator[bytes]:
    """Encoded lines (newline-terminated) of a trace: header, then calls in the given order."""
    yield orjson.dumps(header_to_dict(header), option=_DUMP)
    for c in calls:
        d = call_to_dict(c)
        d["append"] = np.ascontiguousarray(c.append)
        if c.output is not None:
            d["output"] = np.ascontiguousarray(c.output)
        yield orjson.dumps(d, option=_DUMP)


def _ordered(trace: Trace) -> list[Call]:
    """Calls grouped by task (tasks in first-appearance order), each task's calls by index."""
    return [c for cs in trace.tasks.values() for c in sorted(cs, key=lambda c: c.index)]


def write_trace(trace: Trace, path: str | os.PathLike, compresslevel: int = 1) -> None:
    """Write `trace` atomically; gzip when the name ends in `.gz`. Tasks are written contiguously.

    Level 1 by default: token ids are near-random text, so higher levels save ~10% of the size
    for ~7x the time.
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as raw:
            out: IO[bytes] = raw
            if p.name.endswith(".gz"):
                # mtime=0 and no file name: the same trace gives the same bytes.
                out = gzip.GzipFile(  # type: ignore[assignment]
                    filename="", mode="wb", fileobj=raw, compresslevel=compresslevel, mtime=0
                )
            chunk: list[bytes] = []
            size = 0
            for line in trace_lines(trace.header, _ordered(trace)):
                chunk.append(line)
                size += len(line)
                if size >= 1 << 20:  # few large writes: gzip compresses per write call
                    out.write(b"".join(chunk))
                    chunk, size = [], 0
            out.write(b"".join(chunk))
            if out is not raw:
                out.close()
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; a trace is meant to be shared
        os.replace(tmp, p)
    except orjson.JSONEncodeError as e:
        Path(tmp).unlink(missing_ok=True)
        raise TraceError(str(p), None, "meta", f"cannot be written as JSON: {e}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
