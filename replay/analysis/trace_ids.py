"""Which trace each run replayed, by the sha256 its run.json records: comparing two sets of runs
(`replay compare`, `report --vs`, `calibrate`) is a comparison of settings only on one trace."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import orjson

__all__ = ["run_provenance", "trace_sha256_of", "traces_of", "short_shas"]


def run_provenance(run_dir: str | Path) -> dict:
    """A run's run.json `provenance` ({} when unreadable or absent)."""
    try:
        prov = orjson.loads((Path(run_dir) / "run.json").read_bytes()).get("provenance")
    except (OSError, orjson.JSONDecodeError, AttributeError):
        return {}
    return prov if isinstance(prov, dict) else {}


def trace_sha256_of(run_dir: str | Path) -> str | None:
    """The `provenance.trace_sha256` of a run (None: unreadable, or written without it)."""
    value = run_provenance(run_dir).get("trace_sha256")
    return str(value) if value else None


def traces_of(run_dirs: Iterable[str | Path]) -> set[str]:
    """The sha256 of every trace these runs replayed (runs that do not say are left out)."""
    return {s for s in (trace_sha256_of(d) for d in run_dirs) if s is not None}


def short_shas(traces: Iterable[str]) -> str:
    """The sha256s as a message names them: their first 12 digits, sorted."""
    return ", ".join(sorted(t[:12] for t in traces))
