"""Write trace files (format v1, JSON Lines, gzip by name): keys in a fixed order, so
read -> write -> read -> write is byte-identical."""

from __future__ import annotations

import gzip
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np
import orjson

from replay.errors import TraceError
from replay.trace.model import Call, Trace, TraceHeader

__all__ = ["header_to_dict", "call_to_dict", "trace_lines", "write_trace"]


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


def write_trace(
    trace: Trace, path: str | os.PathLike, compresslevel: int = 1, verify: bool = False
) -> None:
    """Write `trace` atomically; gzip when the name ends in `.gz`. Tasks are written contiguously.

    Level 1 by default: token ids are near-random text, so higher levels save ~10% of the size
    for ~7x the time. With `verify`, the written bytes are read back with every check of the
    reader (`replay trace validate`'s) before they take `path`: a TraceError naming `path`, its
    line and field leaves nothing there (an import or transform never writes a file the reader
    refuses).
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
        if verify:
            _read_back(Path(tmp), str(p))
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; a trace is meant to be shared
        os.replace(tmp, p)
    except orjson.JSONEncodeError as e:
        Path(tmp).unlink(missing_ok=True)
        raise TraceError(str(p), None, "meta", f"cannot be written as JSON: {e}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _read_back(tmp: Path, file: str) -> None:
    """The reader's verdict on the bytes in `tmp`, reported under `file`, the name they are for."""
    from replay.trace.io import read_trace_checked

    try:
        read_trace_checked(file, tmp.read_bytes())
    except TraceError as e:
        why = f"{e.why} (not written: the reader would refuse this file)"
        raise TraceError(e.file, e.line, e.field, why) from None
