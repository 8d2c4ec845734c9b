"""Run a client command and measure the CPU time of its whole process tree (Linux /proc).

A client may be one process (replay) or a dozen (AIPerf's controller, dataset manager, timing
manager, workers, record processors, each a Python interpreter), so its own CPU time says
little. Two lower bounds are taken and the larger kept:
- the tree sampled from /proc every `interval_s`: each process ever seen under the command,
  its own user + system time at the last sample (a process that ends between samples loses at
  most one interval of CPU; processes that left the tree, e.g. re-parented, still count);
- `os.wait4` on the command: its own CPU plus that of every descendant it waited for.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, own user + system CPU s) of a live process, None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK


def _tree_sample(root: int, seen: dict[int, float]) -> None:
    """Update `seen` (pid -> own CPU s) with the live descendants of `root`, root included."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            st = _stat(int(entry.name))
            if st is not None:
                parents[int(entry.name)], cpu[int(entry.name)] = st
    tree = {root}
    grew = True
    while grew:  # a few passes: the tree is shallow
        grew = False
        for pid, ppid in parents.items():
            if ppid in tree and pid not in tree:
                tree.add(pid)
                grew = True
    for pid in tree:
        if pid in cpu:
            seen[pid] = max(seen.get(pid, 0.0), cpu[pid])


def _pin(cpus: set[int] | None, nice: int):
    """What the child does before exec: its CPUs, then its niceness (negative needs root)."""

    def setup() -> None:
        if cpus:
            os.sched_setaffinity(0, cpus)
        if nice:
            os.setpriority(os.PRIO_PROCESS, 0, nice)

    return setup if cpus or nice else None


def run_measured(
    argv: list[str],
    *,
    env: dict | None = None,
    cpus: set[int] | None = None,
    nice: int = 0,
    interval_s: float = 0.1,
    timeout_s: float = 1800,
    log: Path | None = None,
) -> dict:
    """Run `argv` (pinned to `cpus`, at niceness `nice`, when given) to its end; returns rc,
    cpu_s, wall_s and the two CPU figures it was taken from."""
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 - closed below
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv, env=env, stdout=out, stderr=subprocess.STDOUT,
        preexec_fn=_pin(cpus, nice),
    )  # fmt: skip
    seen: dict[int, float] = {}
    try:
        while True:
            _tree_sample(proc.pid, seen)
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid == proc.pid:
                break
            if time.perf_counter() - t0 > timeout_s:
                proc.kill()
                raise TimeoutError(f"{argv[0]} ran past {timeout_s} s")
            time.sleep(interval_s)
    finally:
        if log:
            out.close()  # type: ignore[union-attr]
    proc.returncode = os.waitstatus_to_exitcode(status)
    waited = round(usage.ru_utime + usage.ru_stime, 3)
    sampled = round(sum(seen.values()), 3)
    return {
        "rc": proc.returncode,
        "cpu_s": max(waited, sampled),
        "cpu_waited_s": waited,
        "cpu_sampled_s": sampled,
        "processes": len(seen),
        "wall_s": time.perf_counter() - t0,
    }
