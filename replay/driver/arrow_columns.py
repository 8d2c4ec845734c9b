"""Rows -> a pyarrow table without importing pandas, for writing calls.parquet.

`pa.table`, `pa.array` and even `pa.scalar` import pandas when it is installed (pyarrow checks
whether its input is a pandas object), and that import was ~0.3 s of CPU: a sixth of a whole
`replay run` of 256 100K-token calls. Here each column of plain values is laid out in numpy and
handed to `pa.Array.from_buffers`, which checks nothing of the kind. A column holding anything
else (a bool in an int column, an int past int32, a value of an unexpected type) goes through
`pa.array` as before, so every value is converted, or refused, exactly as it was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["rows_table"]

_NUMERIC = {pa.int64(): np.int64, pa.int32(): np.int32, pa.float64(): np.float64}
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def rows_table(rows: Sequence[Mapping[str, Any]], schema: pa.Schema) -> pa.Table:
    """A table with `schema`'s columns, in order, from `rows`; a missing key is null."""
    arrays = []
    for field in schema:
        values = [r.get(field.name) for r in rows]
        fast = _column(values, field.type)
        arrays.append(fast if fast is not None else pa.array(values, type=field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _column(values: list[Any], arrow: pa.DataType) -> pa.Array | None:
    """The column built from numpy buffers, or None when its values need pyarrow's conversion."""
    valid = [v is not None for v in values]
    present = [v for v in values if v is not None]
    n_null = len(values) - len(present)
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if n_null else None
    if arrow == pa.string():
        if not all(type(v) is str for v in present):
            return None
        data = [v.encode() for v in present]
        lengths = [len(b) for b in data]
        if sum(lengths) > _INT32_MAX:  # past 32-bit offsets: pyarrow's own conversion decides
            return None
        offsets = np.zeros(len(values) + 1, np.int32)
        np.cumsum(_spread(lengths, valid), out=offsets[1:])
        buffers = [bitmap, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))]
        return pa.Array.from_buffers(arrow, len(values), buffers, null_count=n_null)
    dtype = _NUMERIC.get(arrow)
    if dtype is None:
        return None
    kinds = (int, float) if dtype is np.float64 else (int,)
    if not all(type(v) in kinds for v in present):  # `type`, not isinstance: bools fall back
        return None
    if present and not _fits(present, dtype):
        return None
    filled = np.array([v if ok else 0 for v, ok in zip(values, valid, strict=True)], dtype)
    return pa.Array.from_buffers(arrow, len(values), [bitmap, pa.py_buffer(filled)], n_null)


def _spread(lengths: list[int], valid: list[bool]) -> np.ndarray:
    """Per-row byte lengths, 0 for nulls (`lengths` has one entry per present value)."""
    out = np.zeros(len(valid), np.int64)
    out[np.flatnonzero(valid)] = lengths
    return out


def _fits(present: list[Any], dtype: type) -> bool:
    """Every value converts exactly: ints within the column's range; in a float column, ints
    that a double holds exactly (pyarrow refuses the others)."""
    if dtype is np.float64:
        ints = [v for v in present if type(v) is int]
        return not ints or (min(ints) >= -(2**53) and max(ints) <= 2**53)
    lo, hi = min(present), max(present)
    if dtype is np.int32:
        return lo >= _INT32_MIN and hi <= _INT32_MAX
    return lo >= -(2**63) and hi < 2**63
