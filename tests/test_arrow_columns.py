"""calls.parquet built from numpy buffers (no pandas import) is the file `pa.table` wrote."""

from __future__ import annotations

import io
import math
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from replay.driver.arrow_columns import rows_table
from replay.driver.records import CALL_SCHEMA, CallRecord
from replay.errors import ErrorKind
from replay.status import CallStatus


def _parquet(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def _old(rows: list[dict], schema: pa.Schema) -> pa.Table:
    """What write_parquet did before: pyarrow's own conversion of Python lists."""
    return pa.table({f.name: [r.get(f.name) for r in rows] for f in schema}, schema=schema)


def _rows() -> list[dict]:
    ok = CallRecord("täsk-0", 0, 3, 0.5, 0.51, 0.6, 0.9, 0.01, 100_000, 100_000, 16, 16, 0,
                    None, 0, 1.0, CallStatus.OK, None, None, 0.61, 0.89, 16)  # fmt: skip
    bad = CallRecord("t1", 2**31 - 1, 0, 1.0, 1.0, None, 2.0, 0.0, 5, None, 1, None, None, None,
                     None, None, CallStatus.ERROR, ErrorKind.HTTP_5XX, "503 ✗ busy")  # fmt: skip
    rows = [ok.as_row(), bad.as_row()]
    rows.append(
        {
            "task": "",
            "call": -(2**31),
            "slot": 0,
            "t_send": float("nan"),
            "drift_s": float("inf"),
            "t_end": 7,
            "prompt_tokens": 2**62,
            "status": "ok",
        }
    )  # fmt: skip  (an int in a float column, missing keys: null)
    return rows


@pytest.mark.parametrize("n", [0, 1, 3])
def test_same_parquet_bytes_as_pyarrow_conversion(n):
    rows = _rows()[:n]
    assert _parquet(rows_table(rows, CALL_SCHEMA)) == _parquet(_old(rows, CALL_SCHEMA))
    got = rows_table(rows, CALL_SCHEMA)
    got.validate(full=True)
    if n == 3:
        assert math.isnan(got["t_send"][2].as_py()) and got["t_first_token"][2].as_py() is None


@pytest.mark.parametrize(
    "column, value",
    [("call", 2**31), ("call", True), ("prompt_tokens", 2**64), ("t_end", 2**60 + 1),
     ("t_end", "1.5"), ("task", 5), ("exact_match", True)],
)  # fmt: skip
def test_values_pyarrow_converts_or_refuses_go_through_it(column, value):
    rows = [_rows()[0] | {column: value}]
    try:
        want = _parquet(_old(rows, CALL_SCHEMA))
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
        with pytest.raises(type(e), match=str(e)[:30]):
            rows_table(rows, CALL_SCHEMA)
        return
    assert _parquet(rows_table(rows, CALL_SCHEMA)) == want


def test_writing_calls_parquet_imports_no_pandas(tmp_path):
    code = (
        "import sys\nfrom replay.driver.records import CallRecord, write_parquet\n"
        "from replay.status import CallStatus\n"
        "r = CallRecord('t', 0, 0, 0.0, 0.0, None, 1.0, 0.0, 1, 1, 1, 1, 0, None, None, None,"
        " CallStatus.OK, None, None)\n"
        f"write_parquet([r.as_row()], {str(tmp_path / 'calls.parquet')!r})\n"
        "print('pandas' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    assert pq.read_table(tmp_path / "calls.parquet").num_rows == 1
