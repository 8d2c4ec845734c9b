"""The order runs happen in: points x repeats, interleaved by repeat round, seeded.

Round r holds repeat r of every point; `random` shuffles each round with its own
`random.Random((seed, r))`, so slow drifts of the machine (thermal, background load) spread over
all points instead of biasing whichever point ran last, and the order is the same on every rerun.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from replay.sweep.config import Experiment, Point

__all__ = ["PlannedRun", "plan_runs", "repeat_name"]


@dataclass(frozen=True)
class PlannedRun:
    """One replay of one point: its results live in `<experiment>/<point.name>/<repeat_name>/`."""

    point: Point
    repeat: int

    @property
    def repeat_name(self) -> str:
        return repeat_name(self.repeat)

    @property
    def rel_dir(self) -> str:
        return f"{self.point.name}/{self.repeat_name}"


def repeat_name(repeat: int) -> str:
    return f"r{repeat}"


def plan_runs(exp: Experiment, order: str | None = None) -> list[PlannedRun]:
    """All runs of the experiment in execution order (`order` overrides the file's)."""
    order = order or exp.order
    points = exp.points()
    runs: list[PlannedRun] = []
    for r in range(exp.repeats):
        round_points = list(points)
        if order == "random":
            random.Random(f"{exp.seed}:{r}").shuffle(round_points)
        runs.extend(PlannedRun(p, r) for p in round_points)
    return runs
