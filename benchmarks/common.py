"""Shared helpers for the benchmark modules: results/bench.json (merged atomically), spreads."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from statistics import median

import orjson

BENCH_JSON = Path("results/bench.json")


def merge_results(section: str, values: dict) -> None:
    """Store `values` under `section` in results/bench.json, keeping the other sections."""
    BENCH_JSON.parent.mkdir(parents=True, exist_ok=True)
    data = orjson.loads(BENCH_JSON.read_bytes()) if BENCH_JSON.exists() else {}
    data[section] = values
    fd, tmp = tempfile.mkstemp(dir=BENCH_JSON.parent, suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    os.replace(tmp, BENCH_JSON)


def spread(values: list[float], digits: int = 2) -> dict:
    """Median and range of repeated measurements, plus the one-line form `median [min-max]`.

    Goals are checked on the median: one lucky or unlucky repetition on a shared machine moves
    the min or the max, not the median.
    """
    if not values:
        return {"median": None, "min": None, "max": None, "n": 0, "text": "n/a"}
    med, lo, hi = (round(float(v), digits) for v in (median(values), min(values), max(values)))
    return {"median": med, "min": lo, "max": hi, "n": len(values), "text": f"{med} [{lo}-{hi}]"}


def load_avg_1m() -> float:
    """The 1-minute load average, recorded beside every timing (other processes add to it)."""
    return round(os.getloadavg()[0], 2)
