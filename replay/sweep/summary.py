"""summary.parquet and summary.csv: one row per run of an experiment (docs/results.md).

Columns: experiment, point, repeat, each matrix parameter, engine, status, reason, every key of
the run's summary, and every canonical counter (from counters.json, which is authoritative for
server-scraped counters; None where the engine does not report one).
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
            "repeat": doc.get("repeat", run_dir.name.removeprefix("r")),
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


def write_summary(exp: Experiment, exp_dir: Path) -> pd.DataFrame:
    """Write both summary files atomically and return the table."""
    df = pd.DataFrame(summary_rows(exp, exp_dir))
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    write_bytes_atomic(exp_dir / "summary.parquet", buf.getvalue())
    write_bytes_atomic(exp_dir / "summary.csv", df.to_csv(index=False).encode())
    return df
