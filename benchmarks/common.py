"""Shared helpers for the benchmark modules: results/bench.json (merged atomically), spreads,
and pinning a local server and the client to different cores."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
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

    `median_exact` is the unrounded median, which the goals compare (a rounded 19.996 read 20.0
    and passed a ">= 20" goal). Missing values (None: a repetition that measured nothing) are
    refused rather than counted as 0.
    """
    if any(v is None for v in values):
        raise ValueError(f"a repetition measured nothing: {values}")
    if not values:
        return {"median": None, "median_exact": None, "min": None, "max": None, "n": 0,
                "text": "n/a"}  # fmt: skip
    exact = float(median(values))
    med, lo, hi = (round(float(v), digits) for v in (exact, min(values), max(values)))
    return {"median": med, "median_exact": exact, "min": lo, "max": hi, "n": len(values),
            "text": f"{med} [{lo}-{hi}]"}  # fmt: skip


def load_avg_1m() -> float:
    """The 1-minute load average, recorded beside every timing (other processes add to it)."""
    return round(os.getloadavg()[0], 2)


def split_cores() -> tuple[set[int], set[int]]:
    """(server cores, client cores) of this process's cores: the first core for the server, the
    rest for the client (both share the one core of a 1-core machine)."""
    cores = sorted(os.sched_getaffinity(0))
    server = {cores[0]}
    return server, set(cores[1:]) or server


@contextmanager
def pinned_apart(server_pid: int, on: bool = True) -> Iterator[dict]:
    """Within the block, the server process on its core and this process on the others
    (`split_cores`); both put back as they were after. Yields what was pinned where, for the
    results. On a 2-core machine an unpinned local server is often woken onto the client's
    core: the write that completes a request then waits for the server to run, and send
    timing measures the scheduler instead of the client (docs/driver.md)."""
    if not on:
        yield {"pinned": False}
        return
    server, client = split_cores()
    before_self, before_srv = os.sched_getaffinity(0), os.sched_getaffinity(server_pid)
    os.sched_setaffinity(server_pid, server)
    os.sched_setaffinity(0, client)
    try:
        yield {"pinned": True, "server_cpus": sorted(server), "client_cpus": sorted(client)}
    finally:
        os.sched_setaffinity(0, before_self)
        with suppress(ProcessLookupError):
            os.sched_setaffinity(server_pid, before_srv)
