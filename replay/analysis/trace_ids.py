"""Which trace each run replayed, by the sha256 its run.json records: comparing two sets of runs
(`replay compare`, `report --vs`, `calibrate`) is a comparison of settings only on one trace."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import orjson

__all__ = ["trace_sha256_of", "traces_of"]


def trace_sha256_of(run_dir: str | Path) -> str | None:
    """The `provenance.trace_sha256` of a run (None: unreadable, or written without it)."""
    try:
        prov = orjson.loads((Path(run_dir) / "run.json").read_bytes()).get("provenance") or {}
    except (OSError, orjson.JSONDecodeError, AttributeError):
        return None
    value = prov.get("trace_sha256")
    return str(value) if value else None


def traces_of(run_dirs: Iterable[str | Path]) -> set[str]:
    """The sha256 of every trace these runs replayed (runs that do not say are left out)."""
    return {s for s in (trace_sha256_of(d) for d in run_dirs) if s is not None}
