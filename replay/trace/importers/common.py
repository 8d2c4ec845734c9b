"""Helpers shared by the importers: JSON loading with located errors, common prefixes."""

from __future__ import annotations

import gzip
import io
import os
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from replay.errors import TraceError
from replay.trace.fields import json_error

__all__ = [
    "token_ids",
    "block_ids",
    "load_json",
    "iter_jsonl",
    "common_prefix",
    "expand_sources",
    "unique_names",
    "need",
    "call_lengths",
    "DEFAULT_VOCAB",
]

DEFAULT_VOCAB = 32000
MAX_BLOCK_ID = 2**63 - 1  # a trace stores block ids as int64
_GZIP_MAGIC = b"\x1f\x8b"


def load_json(path: Path) -> Any:
    """A whole JSON document; errors name the file."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise TraceError(str(path), None, None, f"cannot read: {e.strerror or e}") from None
    if data.startswith(_GZIP_MAGIC):  # else the error is "str is not valid UTF-8"
        raise TraceError(str(path), None, None, "is gzip-compressed; decompress it first")
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as e:
        why = json_error(e)
        if e.msg == "unexpected content after document":
            why += "; more than one JSON value: a JSON Lines file? This reads one JSON object"
        raise TraceError(str(path), e.lineno, None, why) from None


def iter_jsonl(path: Path, data: bytes | None = None) -> Iterator[tuple[int, dict]]:
    """(line number, object) of a plain or gzip JSON Lines file, skipping blank lines; `data`, when
    given, is the file's bytes already read (so a caller that hashed them does not read twice)."""
    file = str(path)
    try:
        with open(path, "rb") if data is None else io.BytesIO(data) as raw:
            magic = raw.read(2)
            raw.seek(0)
            f = gzip.GzipFile(fileobj=raw) if magic == _GZIP_MAGIC else raw
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    obj = orjson.loads(line)
                except orjson.JSONDecodeError as e:
                    raise TraceError(file, lineno, None, json_error(e)) from None
                if not isinstance(obj, dict):
                    raise TraceError(file, lineno, None, "line must be a JSON object")
                yield lineno, obj
    except (OSError, EOFError, zlib.error) as e:
        raise TraceError(file, None, None, f"cannot read: {e}") from None


def need(obj: dict, key: str, kinds: type | tuple[type, ...], file: str, line: int | None) -> Any:
    """obj[key], checked against `kinds` (bool never counts as a number)."""
    v = obj.get(key)
    if v is None:
        raise TraceError(file, line, key, "missing")
    if isinstance(v, bool) or not isinstance(v, kinds):
        raise TraceError(file, line, key, f"has the wrong type ({type(v).__name__})")
    return v


def call_lengths(
    file: str, line: int | None, prompt: tuple[str, int], output: tuple[str, int]
) -> None:
    """A call's lengths, checked where they are read, under the source's own field names: the
    reader refuses an empty prompt or one past any context, and its verdict on the written file
    named a line of an output that was never written."""
    from replay.trace.validate import EMPTY_PROMPT, too_long

    field, n = prompt
    if n == 0:
        raise TraceError(file, line, field, EMPTY_PROMPT)
    for field, n in (prompt, output):
        why = too_long(n)
        if why is not None:
            raise TraceError(file, line, field, why)


def common_prefix(a: Sequence, b: Sequence) -> int:
    """Length of the common prefix of two sequences."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def expand_sources(sources: Sequence[str | os.PathLike], pattern: str) -> list[Path]:
    """Files named directly, plus files matching `pattern` inside named directories (sorted).

    A file reached twice (named twice, by another path, or also inside a named directory) is
    refused: it would import as a second copy of its tasks."""
    out: list[Path] = []
    for s in sources:
        p = Path(s)
        if p.is_dir():
            out.extend(sorted(p.glob(pattern)))
        elif p.exists():
            out.append(p)
        else:
            raise TraceError(str(p), None, None, "no such file or directory")
    first: dict[Path, Path] = {}
    for p in out:
        seen = first.setdefault(p.resolve(), p)
        if seen is not p:
            again = "" if str(seen) == str(p) else f" (also as {seen})"
            raise TraceError(str(p), None, None, f"given twice{again}; give each source file once")
    return out


def unique_names(files: Sequence[Path]) -> dict[Path, str]:
    """A name for each file, unique among `files`: its stem, or where two files share a stem
    (d1/trace.jsonl, d2/trace.jsonl), its path from the files' common folder without the suffix
    (d1/trace, d2/trace). An importer names tasks and hash namespaces by it, so two files' tasks
    never merge and their hash ids are never taken as shared."""
    stems = [p.stem for p in files]
    if len(set(stems)) == len(stems):
        return dict(zip(files, stems, strict=True))
    resolved = [p.resolve() for p in files]
    common = Path(os.path.commonpath([str(r.parent) for r in resolved]))
    return {
        p: str(r.relative_to(common).with_suffix("")) for p, r in zip(files, resolved, strict=True)
    }


def token_ids(obj: dict, key: str, file: str, line: int) -> np.ndarray:
    """A field holding a list of token ids, as int32; errors name the file, line and field."""
    v = obj.get(key)
    if not isinstance(v, list):
        raise TraceError(file, line, key, "missing or not an array of token ids")
    if not v:
        return np.empty(0, np.int32)
    # `type(t) is int` per element: numpy would read `true` as 1, and raise on nested lists
    bad = next((i for i, t in enumerate(v) if type(t) is not int or not 0 <= t < 2**31), None)
    if bad is not None:
        raise TraceError(
            file,
            line,
            f"{key}[{bad}]",
            f"is {_show(v[bad])}; token ids are integers in 0 .. 2**31-1",
        )
    return np.asarray(v, dtype=np.int32)


def block_ids(v: Any, field: str, file: str, line: int | None) -> list[int]:
    """A field's value holding block hash ids: an array of JSON integers in 0 .. 2**63-1.

    Checked per element (`type(h) is int`): numpy would read 1.7, `true` and "1" as 1 and 1e3 as
    1000, and a changed id is a different block. Errors name the file, line and `field[i]`."""
    if not isinstance(v, list):
        raise TraceError(file, line, field, "missing or not an array of block hash ids")
    bad = next(
        (i for i, h in enumerate(v) if type(h) is not int or not 0 <= h <= MAX_BLOCK_ID), None
    )
    if bad is not None:
        raise TraceError(
            file,
            line,
            f"{field}[{bad}]",
            f"is {_show(v[bad])}; block hash ids are integers in 0 .. 2**63-1",
        )
    return v


def _show(v: Any) -> str:
    """A bad value for an error line, cut short (an array of arrays can be long)."""
    text = orjson.dumps(v).decode() if v is None or isinstance(v, bool | list | dict) else repr(v)
    return text if len(text) <= 40 else text[:37] + "..."
