"""Shared helpers for the benchmark modules: merge results into results/bench.json atomically."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

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
