"""Result files, the "is this run finished?" rule that resume relies on, and run directories
that never mix two runs.

A file is written to a temporary name in the same folder and renamed over the target, so a reader
(or a crash) sees the old file or the new one, never half of one. A write that fails (a full
disk) raises `ResultsWriteError`: one line, exit 1, and the files already there stay as they were.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from replay.driver.records import chmod_by_umask
from replay.errors import ConfigError, ReplayError
from replay.status import RunStatus

__all__ = [
    "write_bytes_atomic",
    "write_json_atomic",
    "read_json",
    "FINISHED_STATUSES",
    "is_finished",
    "clear_run_dir",
    "prepare_out_dir",
    "check_out_dir",
    "make_out_dir",
    "ResultsWriteError",
    "RUN_FILES",
    "PLAN_FILE",
    "PREDICTIONS_FILE",
    "FOLDER_FILES",
    "exclusive_lock",
    "lock_holder",
]

# A run with one of these statuses in its run.json is not run again unless --force.
# `failed` and `interrupted` runs are retried on the next sweep, and so is an `errors` run in
# which every call failed (a server that refused everything, not a measurement).
FINISHED_STATUSES = (RunStatus.OK, RunStatus.ERRORS)
_JSON = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
# What a run directory may hold (docs/results.md); `--force` clears only directories made of these.
REPORT_FILES = frozenset({"report.md", "report.html", "figures"})  # `replay report DIR`
PLAN_FILE = "plan.json"  # every planned run's `<point>/<repeat>`, written before the first runs
PREDICTIONS_FILE = "predictions.json"
# what a sweep's folder holds about its runs as a whole, beside their directories
# (docs/results.md): `replay report` reads them, `--force` sets them aside with the runs
FOLDER_FILES = frozenset(
    {"experiment.toml", PLAN_FILE, PREDICTIONS_FILE, "summary.parquet", "summary.csv"}
    | REPORT_FILES
)
RUN_FILES = frozenset(
    {
        "run.json",
        "calls.jsonl",
        "calls.parquet",
        "counters.json",
        "metrics.jsonl",
        "server.log",
        "server.json",
        "prometheus",
        ".server.port",
    }
)


class ResultsWriteError(ReplayError):
    """A result file could not be written (disk full, read-only, quota). Not the input's fault,
    so exit 1; atomic writes leave the previous file in place."""

    exit_code = 1


def _write(f: Any, data: bytes) -> None:
    """The one place bytes reach a result file (tests inject a full disk here)."""
    f.write(data)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise ResultsWriteError(f"{path}: cannot write: {e.strerror or e}") from None
    try:
        chmod_by_umask(fd)  # mkstemp makes 0600; results are shared like any file the user writes
        with os.fdopen(fd, "wb") as f:
            _write(f, data)
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):
            full = " (disk full)" if e.errno in (errno.ENOSPC, errno.EDQUOT) else ""
            raise ResultsWriteError(
                f"{path}: cannot write{full}: {e.strerror or e}; files written before are intact"
            ) from None
        raise


def write_json_atomic(path: Path, obj: Any) -> None:
    write_bytes_atomic(path, orjson.dumps(obj, option=_JSON, default=str) + b"\n")


def read_json(path: Path) -> Any | None:
    """The parsed file, or None when it is missing or unreadable (a run that never finished)."""
    try:
        return orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None


def is_finished(run_dir: Path, *, keep_all_failed: bool = False) -> bool:
    """Whether resume skips this run: its status is ok or errors, and (unless `keep_all_failed`)
    at least one of its calls succeeded."""
    run = read_json(run_dir / "run.json")
    if not isinstance(run, dict) or run.get("status") not in FINISHED_STATUSES:
        return False
    if keep_all_failed or run.get("status") != "errors":
        return True
    return not all_calls_failed(run)


def all_calls_failed(run: Any) -> bool:
    """Whether a run's run.json (parsed) says every call failed: a server that refused
    everything measured nothing, whatever its status."""
    summary = run.get("summary") if isinstance(run, dict) else None
    if not isinstance(summary, dict):
        return False
    calls, errors = summary.get("calls"), summary.get("errors")
    return isinstance(calls, int) and isinstance(errors, int) and errors >= calls > 0


def clear_run_dir(run_dir: Path) -> None:
    """Remove a previous attempt's files so a rerun starts clean. A `replay run` lock held on
    the directory stays: removed, a second run could take a new one beside it."""
    if run_dir.exists():
        for entry in run_dir.iterdir():
            if entry.name == LOCK_FILE:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    run_dir.mkdir(parents=True, exist_ok=True)


def prepare_out_dir(out_dir: Path, *, force: bool, option: str = "--out") -> None:
    """Make `out_dir` an empty run directory. A non-empty one is refused (its files would be read
    as this run's: a simulator's counters.json beside an HTTP run's calls); with `force` it is
    cleared, but only when it holds nothing but a run's files, so a mistyped path never loses
    unrelated data."""
    if check_out_dir(out_dir, force=force, option=option):
        try:
            clear_run_dir(out_dir)
        except OSError as e:
            raise ConfigError(str(out_dir), option, f"cannot clear: {e.strerror or e}") from None
    make_out_dir(out_dir, option)


def make_out_dir(out_dir: Path, option: str = "--out") -> None:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(str(out_dir), option, f"cannot create: {e.strerror or e}") from None


def check_out_dir(out_dir: Path, *, force: bool, option: str = "--out") -> bool:
    """`prepare_out_dir`'s refusals, touching nothing; True when `force` will clear it."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(str(out_dir), option, "exists and is not a directory")
    entries = (
        sorted(p.name for p in out_dir.iterdir() if p.name != LOCK_FILE) if out_dir.is_dir() else []
    )
    if entries:
        shown = ", ".join(entries[:4]) + (", ..." if len(entries) > 4 else "")
        if not force:
            raise ConfigError(
                str(out_dir),
                option,
                f"not empty ({shown}); pass --force to clear it, or choose a new directory",
            )
        # what `replay report` writes into a run directory is the project's own too
        foreign = [
            n
            for n in entries
            if n not in RUN_FILES and n not in REPORT_FILES and not n.endswith(".tmp")
        ]
        if foreign:
            raise ConfigError(
                str(out_dir),
                option,
                f"holds files a run does not write ({', '.join(foreign[:4])}); "
                "--force clears only run directories: choose a new directory",
            )
    return bool(entries)


LOCK_FILE = ".lock"


@contextlib.contextmanager
def exclusive_lock(exp_dir: Path, what: str = "sweep") -> Iterator[None]:
    """Hold `exp_dir/.lock` for a whole sweep (or `replay run`, `what` = "run"), so a second one
    on the same directory is refused instead of running beside the first (and deleting or
    doubling what the first is writing). flock is released by the kernel when the holder dies,
    however it dies, so a killed one never leaves a stale lock; the PID and host written in the
    file are only for the message."""
    import fcntl

    path = exp_dir / LOCK_FILE
    try:
        exp_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as e:
        why = f"cannot create the {what}'s lock: {e.strerror or e}"
        raise ConfigError(str(path), None, why) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "unknown process"
            raise ConfigError(
                str(exp_dir),
                None,
                f"another {what} ({holder}) is using this {'results ' if what == 'sweep' else ''}"
                f"directory; wait for it to end or stop it (a killed {what} releases the lock "
                "by itself)",
            ) from None
        me = f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%H:%M:%S')}"
        os.ftruncate(fd, 0)
        os.pwrite(fd, me.encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock; the file stays (unlinking it would race a new taker)


def lock_holder(exp_dir: Path) -> str | None:
    """Who holds `exp_dir`'s sweep lock ("pid N on HOST since T"), None when no sweep does.
    Only looks: the lock is taken and let go at once when free, and nothing is created."""
    import fcntl

    try:
        fd = os.open(exp_dir / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "unknown process"
        return None
    finally:
        os.close(fd)
