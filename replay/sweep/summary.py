"""summary.parquet and summary.csv: one row per run of an experiment (docs/results.md).

Columns: experiment, point, repeat, each matrix parameter, engine, status, reason, every key of
the run's summary, and every canonical counter (from counters.json, which is authoritative for
server-scraped counters; None where the engine does not report one).

A run that stopped half way may have a placeholder run.json (the driver's, without the sweep's
keys): its row still gets `repeat` as an integer from the directory name, and a column whose
runs disagree on a value's type is written as text, so one odd run never loses the summary.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pandas as pd

from replay.counters import CANONICAL_COUNTERS
from replay.sweep.config import Experiment
from replay.sweep.results import read_json, write_bytes_atomic

__all__ = ["summary_rows", "write_summary"]

_SCALAR = (str, int, float, bool, type(None))


def summary_rows(exp: Experiment, exp_dir: Path) -> list[dict[str, Any]]:
    """Rows for every run directory that has a run.json, in point order then repeat."""
    matrix_keys = [k for k, _ in exp.matrix]
    rows = []
    for run_json in sorted(exp_dir.glob("*/r*/run.json")):
        doc = read_json(run_json)
        if not isinstance(doc, dict):
            continue
        run_dir = run_json.parent
        point = doc.get("point") or {}
        row: dict[str, Any] = {
            "experiment": exp.name,
            "point": doc.get("point_name", run_dir.parent.name),
            "repeat": _repeat(doc.get("repeat"), run_dir.name),
        }
        for key in matrix_keys:
            row[key] = point.get(key)
        row["engine"] = doc.get("engine")
        row["status"] = doc.get("status")
        row["reason"] = doc.get("reason")
        for key, value in (doc.get("summary") or {}).items():
            if isinstance(value, _SCALAR):
                row.setdefault(key, value)
        counters = read_json(run_dir / "counters.json") or {}
        for name in CANONICAL_COUNTERS:
            if name in counters:
                row[name] = counters[name]
            else:
                row.setdefault(name, None)
        rows.append(row)
    return rows


def _repeat(recorded: Any, dir_name: str) -> int | None:
    """The repeat index: run.json's integer, else the one in the `r<N>` directory name."""
    if isinstance(recorded, int) and not isinstance(recorded, bool):
        return recorded
    digits = dir_name.removeprefix("r")
    return int(digits) if digits.isdigit() else None


def _one_type_per_column(df: pd.DataFrame) -> pd.DataFrame:
    """Parquet needs one type per column: a column holding, say, numbers in some runs and text
    in another (an engine that reports a counter as a string) becomes text; None stays None.
    Integers beside floats are numbers, not a conflict."""
    for col in [c for c in df.columns if df[c].dtype == "object"]:
        kinds = {
            "number" if isinstance(v, (int, float)) and not isinstance(v, bool) else type(v)
            for v in df[col]
            if v is not None and not (isinstance(v, float) and v != v)
        }
        if len(kinds) > 1:
            df[col] = [None if v is None else str(v) for v in df[col]]
    return df


def write_summary(exp: Experiment, exp_dir: Path) -> pd.DataFrame:
    """Write both summary files atomically and return the table."""
    df = _one_type_per_column(pd.DataFrame(summary_rows(exp, exp_dir)))
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    write_bytes_atomic(exp_dir / "summary.parquet", buf.getvalue())
    write_bytes_atomic(exp_dir / "summary.csv", df.to_csv(index=False).encode())
    return df
