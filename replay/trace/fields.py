"""Typed field access for one parsed trace line: each getter checks the JSON type and range
and raises `TraceError(file, line, field, why)` naming the field, so validation reads as a list of
field rules (`validate`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import orjson

from replay.errors import TraceError
from replay.trace.model import CallRef
from replay.trace.schedule import MAX_AT_S, MAX_SPAN_S

__all__ = ["Line", "kind", "json_error"]


def kind(v: Any) -> str:
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


class Line:
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
        if isinstance(v, float) and v.is_integer() and abs(v) >= 2**63:
            # orjson reads an integer past 64 bits as a float: not "a number" to whoever wrote it
            raise self.fail(key, f"must be an integer, got {v:.3g}, past 64 bits")
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(key, f"must be an integer, got {kind(v)}")
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
            raise self.fail(key, f"must be a number of seconds, got {kind(v)}")
        v = float(v)
        if not math.isfinite(v) or v < 0:
            raise self.fail(key, f"must be a finite number >= 0, got {v}")
        most_s = MAX_AT_S if key == "at_s" else MAX_SPAN_S
        if v > most_s:
            raise self.fail(
                key, f"{v:,.0f} s is more than {most_s:,.0f} s: seconds, not milliseconds?"
            )
        return v

    def str_(self, key: str, required: bool = True) -> str | None:
        v = self.obj.get(key)
        if v is None:
            if required:
                raise self.fail(key, "missing (required string)")
            return None
        if not isinstance(v, str):
            raise self.fail(key, f"must be a non-empty string, got {kind(v)}")
        if not v:
            raise self.fail(key, "must be a non-empty string, got an empty one")
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
            raise self.fail(key, f"must be an array of integers, got {kind(v)}")
        if not v:
            return None
        try:
            arr = np.array(v)
        except (OverflowError, ValueError):
            arr = None
        if arr is None or arr.ndim != 1 or arr.dtype.kind not in "iu":
            # the error path only: find the first entry that is not a 64-bit integer
            for i, x in enumerate(v):
                if isinstance(x, float) and x.is_integer() and abs(x) >= 1 << 63:
                    raise self.fail(f"{key}[{i}]", f"{x:.3g} does not fit in 64 bits")
                if isinstance(x, bool) or not isinstance(x, int):
                    raise self.fail(f"{key}[{i}]", f"must be an integer, got {x!r:.40}")
                if not -(1 << 63) <= x < 1 << 64:
                    raise self.fail(f"{key}[{i}]", f"{x:.3g} does not fit in 64 bits")
            raise self.fail(key, "must be an array of 64-bit integers")
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


def json_error(e: orjson.JSONDecodeError) -> str:
    """What is wrong with a line or file orjson refused, in the file's own terms: orjson's
    message counts lines from the text it was given (one line of a file: always line 1 or 2),
    and calls text in another encoding a string with surrogates."""
    if "not valid UTF-8" in e.msg:
        return "not UTF-8 text (Latin-1 or UTF-16?); convert the file to UTF-8"
    return f"invalid JSON: {e.msg}, column {e.colno}"
