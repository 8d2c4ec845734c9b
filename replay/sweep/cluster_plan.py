"""What a sweep on a cluster asks for and keeps track of: each run's resources, the rule for runs
lost with their node, and the head's progress line (done / running on which node / queued, ETA).

Pure bookkeeping, no Ray and no clock of its own (times are passed in), so the rules are tested
without a cluster; `replay.sweep.ray_backend` drives it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from replay.engines.registry import get_engine
from replay.sweep.config import Experiment, Point
from replay.sweep.plan import plan_runs

__all__ = ["MAX_ATTEMPTS", "run_resources", "resources_lines", "Board", "format_duration"]

# A run lost with its node (not an engine crash, which is a result) runs once more elsewhere,
# then is recorded failed: a node that keeps dying must not hold a sweep forever.
MAX_ATTEMPTS = 2


def run_resources(exp: Experiment, point: Point) -> dict[str, float]:
    """What one run of `point` asks the cluster for: `[cluster] resources` when the file sets
    it, else the adapter's (`{"GPU": tp}` for a GPU engine, one CPU for the simulator)."""
    if exp.cluster.resources is not None:
        return dict(exp.cluster.resources)
    engine, options, _ = exp.resolve(point)
    return get_engine(engine).needs(options)


def _fmt_resources(resources: dict[str, float]) -> str:
    parts = [f"{k}={v:g}" for k, v in sorted(resources.items())]
    return "{" + ", ".join(parts) + "}"


def resources_lines(exp: Experiment, order: str | None = None) -> list[str]:
    """`--dry-run --ray`: each run, in planned order, with the resources its Ray task asks for."""
    planned = plan_runs(exp, order)
    lines = [f"ray: {len(planned)} task(s), one per run (point x repeat), each on one node:"]
    lines += [f"   {p.rel_dir}: {_fmt_resources(run_resources(exp, p.point))}" for p in planned]
    return lines


def format_duration(seconds: float) -> str:
    s = max(0, round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


@dataclass
class _Run:
    attempts: int = 0
    node: str | None = None  # where the current attempt started; None while queued
    started_s: float | None = None


@dataclass
class Board:
    """The head's view of the runs it submitted. Keys are run directories (`<point>/r<k>`)."""

    total: int  # runs of the sweep this time (skipped ones excluded)
    runs: dict[str, _Run] = field(default_factory=dict)
    done: int = 0
    durations_s: list[float] = field(default_factory=list)

    def submitted(self, key: str) -> None:
        run = self.runs.setdefault(key, _Run())
        run.attempts += 1
        run.node, run.started_s = None, None

    def started(self, key: str, node: str, now_s: float) -> None:
        run = self.runs.get(key)
        if run is not None and run.node is None:
            run.node, run.started_s = node, now_s

    def finished(self, key: str, now_s: float) -> str | None:
        """Forget a finished run; returns the node it ran on (None if never seen starting)."""
        run = self.runs.pop(key, None)
        if run is None:
            return None
        self.done += 1
        if run.started_s is not None:
            self.durations_s.append(now_s - run.started_s)
        return run.node

    def lost(self, key: str) -> tuple[bool, str | None]:
        """The run's task died with its node (or its worker): (run it again?, node it was on).
        True until it has been lost MAX_ATTEMPTS times."""
        run = self.runs.get(key)
        if run is None:
            return False, None
        return run.attempts < MAX_ATTEMPTS, run.node

    def node_of(self, key: str) -> str | None:
        run = self.runs.get(key)
        return None if run is None else run.node

    def running(self) -> dict[str, str]:
        return {k: r.node for k, r in self.runs.items() if r.node is not None}

    def eta_s(self, now_s: float) -> float | None:
        """Seconds until the last run ends: the mean run time so far times the work left,
        spread over as many runs at once as are running now. None before any run finished."""
        if not self.durations_s:
            return None
        mean_s = sum(self.durations_s) / len(self.durations_s)
        active = [r for r in self.runs.values() if r.started_s is not None]
        queued = len(self.runs) - len(active)
        elapsed_s = [now_s - r.started_s for r in active if r.started_s is not None]
        left_s = queued * mean_s + sum(max(0.0, mean_s - e) for e in elapsed_s)
        return left_s / max(1, len(active))

    def progress_line(self, now_s: float) -> str:
        by_node: dict[str, int] = {}
        for node in self.running().values():
            by_node[node] = by_node.get(node, 0) + 1
        where = ", ".join(f"{n} x{c}" if c > 1 else n for n, c in sorted(by_node.items()))
        queued = len(self.runs) - sum(by_node.values())
        eta = self.eta_s(now_s)
        return (
            f"ray: {self.done}/{self.total} done, {sum(by_node.values())} running"
            + (f" ({where})" if where else "")
            + f", {queued} queued, ETA {'unknown' if eta is None else format_duration(eta)}"
        )
