"""Atomic result files and the "is this run finished?" rule that resume relies on.

A file is written to a temporary name in the same folder and renamed over the target, so a reader
(or a crash) sees the old file or the new one, never half of one.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import orjson

from replay.status import RunStatus

__all__ = [
    "write_bytes_atomic",
    "write_json_atomic",
    "read_json",
    "FINISHED_STATUSES",
    "is_finished",
    "clear_run_dir",
]

# A run with one of these statuses in its run.json is not run again unless --force.
# `failed` and `interrupted` runs are retried on the next sweep.
FINISHED_STATUSES = (RunStatus.OK, RunStatus.ERRORS)
_JSON = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def write_bytes_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, obj: Any) -> None:
    write_bytes_atomic(path, orjson.dumps(obj, option=_JSON, default=str) + b"\n")


def read_json(path: Path) -> Any | None:
    """The parsed file, or None when it is missing or unreadable (a run that never finished)."""
    try:
        return orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None


def is_finished(run_dir: Path) -> bool:
    run = read_json(run_dir / "run.json")
    return isinstance(run, dict) and run.get("status") in FINISHED_STATUSES


def clear_run_dir(run_dir: Path) -> None:
    """Remove a previous attempt's files so a rerun starts clean."""
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
