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

__all__ = [
    "token_ids",
    "load_json",
    "iter_jsonl",
    "common_prefix",
    "expand_sources",
    "need",
    "DEFAULT_VOCAB",
]

DEFAULT_VOCAB = 32000


def load_json(path: Path) -> Any:
    """A whole JSON document; errors name the file."""
    try:
        return orjson.loads(path.read_bytes())
    except OSError as e:
        raise TraceError(str(path), None, None, f"cannot read: {e.strerror or e}") from None
    except orjson.JSONDecodeError as e:
        raise TraceError(str(path), e.lineno, None, f"invalid JSON: {e.msg}") from None


def iter_jsonl(path: Path, data: bytes | None = None) -> Iterator[tuple[int, dict]]:
    """(line number, object) of a plain or gzip JSON Lines file, skipping blank lines; `data`, when
    given, is the file's bytes already read (so a caller that hashed them does not read twice)."""
    file = str(path)
    try:
        with open(path, "rb") if data is None else io.BytesIO(data) as raw:
            magic = raw.read(2)
            raw.seek(0)
            f = gzip.GzipFile(fileobj=raw) if magic == b"\x1f\x8b" else raw
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    obj = orjson.loads(line)
                except orjson.JSONDecodeError as e:
                    raise TraceError(file, lineno, None, f"invalid JSON: {e.msg}") from None
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


def common_prefix(a: Sequence, b: Sequence) -> int:
    """Length of the common prefix of two sequences."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def expand_sources(sources: Sequence[str | os.PathLike], pattern: str) -> list[Path]:
    """Files named directly, plus files matching `pattern` inside named directories (sorted)."""
    out: list[Path] = []
    for s in sources:
        p = Path(s)
        if p.is_dir():
            out.extend(sorted(p.glob(pattern)))
        elif p.exists():
            out.append(p)
        else:
            raise TraceError(str(p), None, None, "no such file or directory")
    return out


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


def _show(v: Any) -> str:
    """A bad value for an error line, cut short (an array of arrays can be long)."""
    text = orjson.dumps(v).decode() if v is None or isinstance(v, bool | list | dict) else repr(v)
    return text if len(text) <= 40 else text[:37] + "..."
