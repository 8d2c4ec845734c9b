"""Read trace files (format v1, JSON Lines, optionally gzip), validating every line.

Reading streams line by line and keeps, per task, only the length of its previous context, so
validation is O(calls) in time and memory proportional to the appended (unique) tokens. Every
problem raises `TraceError(file, line, field, why)`; nothing downstream sees a half-valid trace.
The field rules are in `validate`, the writer in `write` (its names are importable from here).
"""

from __future__ import annotations

import gzip
import io
import json
import math
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import orjson

from replay.errors import TraceError
from replay.trace import cache
from replay.trace.fields import json_error, kind
from replay.trace.id_arrays import PLACEHOLDER, cut_ids
from replay.trace.model import Call, Trace, TraceHeader
from replay.trace.validate import TaskState, check_call, check_graph, check_header

# the writer's names stay importable from here, where they have always been
from replay.trace.write import (  # noqa: F401
    _ordered,
    call_to_dict,
    header_to_dict,
    trace_lines,
    write_trace,
)

__all__ = [
    "read_trace",
    "read_header",
    "iter_calls",
    "write_trace",
    "trace_lines",
    "header_to_dict",
    "call_to_dict",
    "check_graph",
    "read_trace_checked",
]

_GZIP_MAGIC = b"\x1f\x8b"


def _open_lines(path: Path, data: bytes | None = None) -> IO[bytes]:
    """Binary line stream of a plain or gzip file (detected by magic bytes, not by name); from
    `data` when the caller already holds the file's bytes."""
    if data is not None:
        f: IO[bytes] = io.BytesIO(data)
    else:
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
        # fails for that reason gets the precise field message from validation instead. The
        # stdlib also takes what orjson rightly refuses (a lone surrogate in a string, a number
        # past a double's range), which later steps could not handle: orjson writing the
        # object back tells those apart, since it writes NaN but refuses both of them.
        try:
            obj = json.loads(raw)
            orjson.dumps(obj)
        except (ValueError, UnicodeDecodeError, TypeError, orjson.JSONEncodeError):
            raise TraceError(file, lineno, None, json_error(e)) from None
        if isinstance(obj, dict):
            for key, value in obj.items():
                where = _non_finite_within(value, key)
                if where is not None:  # a top-level field's own check names it more precisely
                    raise TraceError(
                        file, lineno, where, "NaN and Infinity are not JSON numbers"
                    ) from None
    if not isinstance(obj, dict):
        raise TraceError(file, lineno, None, f"line must be a JSON object, got {kind(obj)}")
    return obj


def _non_finite_within(value: object, path: str) -> str | None:
    """The path of the first NaN or Infinity nested inside `value` (`meta.x`, `recorded.y`),
    None when there is none; `value` itself is left to its field's check."""
    items: list[tuple[str, object]] = []
    if isinstance(value, dict):
        items = [(f"{path}.{k}", v) for k, v in value.items()]
    elif isinstance(value, list):
        items = [(f"{path}[{i}]", v) for i, v in enumerate(value)]
    for where, v in items:
        if isinstance(v, float) and not math.isfinite(v):
            return where
        inner = _non_finite_within(v, where)
        if inner is not None:
            return inner
    return None


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


def _lines(path: Path, file: str, data: bytes | None = None) -> Iterator[tuple[int, bytes]]:
    with _open_lines(path, data) as f:
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
    return _iter_calls(path, None)


def _iter_calls(
    path: str | os.PathLike, data: bytes | None
) -> Iterator[tuple[TraceHeader, Call | None]]:
    p = Path(path)
    file = str(path)
    it = _lines(p, file, data)
    first = next(it, None)
    if first is None:
        raise TraceError(file, 1, None, "empty file: expected a header line and calls")
    lineno, raw = first
    head = check_header(_parse(raw, file, lineno), file)
    yield head, None
    tasks: dict[str, TaskState] = {}
    for lineno, raw in it:
        obj = _parse_call(raw, file, lineno)
        if "format" in obj and "task" not in obj:
            raise TraceError(
                file, lineno, "format", "a second header line; only line 1 is a header"
            )
        yield head, check_call(obj, head, file, lineno, tasks)


def read_trace(path: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> Trace:
    """Read and fully validate a trace file (plain or gzip JSON Lines) into a `Trace`.

    With `cache_dir`, a trace file of MIN_CACHED_BYTES or more is also kept there parsed, and
    read from there while the file's bytes are the same (`trace.cache`; `replay run` passes
    `cache.default_cache_dir()` unless --no-trace-cache).
    """
    p = Path(path)
    if cache_dir is None:
        return _read_parsed(path)
    try:
        size_bytes = p.stat().st_size
    except OSError as e:
        raise TraceError(str(path), None, None, f"cannot open: {e.strerror or e}") from None
    if size_bytes < cache.MIN_CACHED_BYTES:
        return _read_parsed(path)
    # the bytes hashed to find the entry are the bytes parsed on a miss: one read of the file
    # (a file too large to hold is hashed, then read again to parse)
    data, sha256, before = cache.file_bytes_sha256(p)
    got = cache.load(p, sha256, before.st_size, Path(cache_dir))
    if got is not None:
        got.path = str(path)
        return got
    trace = _read_parsed(path, data)
    del data
    after = p.stat()
    # an edit while the file was hashed or parsed: neither the digest nor an entry may stand
    if (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns):
        trace.sha256 = sha256
        cache.store(trace, sha256, before.st_size, Path(cache_dir))
    return trace


def read_trace_checked(path: str | os.PathLike, data: bytes | None = None) -> Trace:
    """`read_trace` with every check `replay trace validate` makes, the whole-trace arrival
    checks included (read_trace leaves those to the commands that schedule calls); from `data`,
    the file's bytes, when given, with errors naming `path`."""
    from replay.trace.schedule import is_open_loop

    trace = _read_parsed(path, data)
    is_open_loop(trace)  # a mix of open- and closed-loop calls cannot be replayed
    return trace


def _read_parsed(path: str | os.PathLike, data: bytes | None = None) -> Trace:
    stream = _iter_calls(path, data)
    head, _ = next(stream)
    calls = [c for _, c in stream if c is not None]
    if not calls:
        raise TraceError(
            str(path), None, None,
            "a header and no call: a truncated download or the wrong file, not a workload",
        )  # fmt: skip
    check_graph(calls, str(path))
    return Trace(head, calls, path=str(path))
