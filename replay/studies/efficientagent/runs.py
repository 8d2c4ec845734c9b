"""Loaded paper-* results and how docs/paper.md prints our numbers.

`PaperRun` wraps one results directory (ok runs with `replay.analysis` derived columns and its
pre-registered predictions); the `*_text` helpers print a statistic the same way in every row.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from replay.analysis.aggregate import describe
from replay.analysis.compare import Comparison
from replay.analysis.derived import add_derived
from replay.analysis.load import Results, load_calls
from replay.analysis.predictions import prediction_table
from replay.analysis.words import fmt_interval

__all__ = ["PAPER_EXPERIMENTS", "PaperRun", "pct", "stat_text", "cmp_text", "ratio_text"]

PAPER_EXPERIMENTS = (
    "paper-h20",
    "paper-chunk256",
    "paper-pool8",
    "paper-hardware",
    "paper-folding",
    "paper-kappa",
    "paper-prefix",
)


class PaperRun:
    """One loaded paper-* results directory: ok runs with derived columns and its predictions."""

    def __init__(self, results: Results, tier_scale: float = 1.0):
        self.results = results
        # Tiers are named as in the study (5, 10, 20, 40, 80 GiB); a reduced workload whose
        # token lengths are scaled by s runs them at s times the size (tests, quick checks).
        self.tier_scale = tier_scale
        self.params = list(results.params)
        runs = add_derived(results.runs, self.params)
        self.ok = runs[runs["status"] == "ok"]
        self.predicted = (
            prediction_table(results.predictions)
            if results.predictions is not None
            else pd.DataFrame()
        )

    def _where(self, where: dict[str, Any]) -> pd.DataFrame | None:
        """The finished runs at the point(s) matching `where` (a tier in the study's GiB), or None
        when a key is not a column of these runs."""
        sel = self.ok
        for k, v in where.items():
            if k == "host_tier_gib":
                v = float(v) * self.tier_scale
            if k not in sel.columns:
                return None
            sel = sel[np.array([_same(x, v) for x in sel[k]], dtype=bool)]
        return sel

    def values(self, metric: str, **where: Any) -> np.ndarray:
        """Per-repeat values of `metric` at the point(s) matching `where` (finite values only)."""
        sel = self._where(where)
        if sel is None or metric not in sel.columns:
            return np.empty(0)
        arr = pd.to_numeric(sel[metric], errors="coerce").to_numpy(dtype=float)
        return arr[np.isfinite(arr)]

    def turn_gaps(self, **where: Any) -> np.ndarray:
        """Seconds between one task's consecutive sends, over the runs at `where` (calls.jsonl)."""

        def gaps(calls: pd.DataFrame) -> list[np.ndarray]:
            by_task = calls.sort_values("t_send").groupby("task")["t_send"]
            return [np.diff(t.to_numpy(dtype=float)) for _, t in by_task]

        return self._from_calls(where, ("task", "t_send"), gaps)

    def first_token_waits(self, **where: Any) -> np.ndarray:
        """Seconds from each call's send to its first token, over the runs at `where`: its wait
        in the engine's queue, its restore and its prefill (calls.jsonl)."""

        def waits(calls: pd.DataFrame) -> list[np.ndarray]:
            w = (calls["t_first_token"] - calls["t_send"]).to_numpy(dtype=float)
            return [w[np.isfinite(w)]]

        return self._from_calls(where, ("t_send", "t_first_token"), waits)

    def _from_calls(
        self,
        where: dict[str, Any],
        columns: tuple[str, ...],
        arrays: Callable[[pd.DataFrame], list[np.ndarray]],
    ) -> np.ndarray:
        """`arrays(calls)` of every run at `where` whose calls have `columns`, joined."""
        sel = self._where(where)
        if sel is None:
            return np.empty(0)
        out: list[np.ndarray] = []
        for run_dir in sel.get("run_dir", []):
            calls = load_calls(run_dir)
            if set(columns) <= set(calls.columns):
                out.extend(arrays(calls))
        return np.concatenate(out) if out else np.empty(0)

    def prediction(self, quantity: str, tier_gib: float, **group: Any) -> float | None:
        p = self.predicted
        if p.empty or quantity not in p.columns:
            return None
        sel = p[np.array([_same(t, tier_gib * self.tier_scale) for t in p["host_tier_gib"]], bool)]
        for k, v in group.items():
            if k in sel.columns:
                sel = sel[np.array([_same(x, v) for x in sel[k]], dtype=bool)]
        vals = pd.to_numeric(sel[quantity], errors="coerce").dropna()
        return float(vals.iloc[0]) if len(vals) else None

    def working_set_gib(self) -> float | None:
        p = self.predicted
        if p.empty or "working_set_gib" not in p.columns:
            return None
        vals = pd.to_numeric(p["working_set_gib"], errors="coerce").dropna()
        return float(vals.iloc[0]) if len(vals) else None


def _same(a: Any, b: Any) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9)
    except (TypeError, ValueError):
        return str(a) == str(b)


# -- formatting helpers -----------------------------------------------------------------------


def pct(x: float | None, signed: bool = True) -> str:
    """`+12.3%` (or `12.3%` unsigned); `-` for unknown."""
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x * 100:+.1f}%" if signed else f"{x * 100:.1f}%"


def stat_text(values: np.ndarray, fmt: Callable[[float], str] | None = None) -> str:
    """Mean ± 95% t half-width over repeats, with n; `-` when there is none."""
    s = describe(values.tolist())
    if s.n == 0:
        return "-"
    if fmt is not None:
        half = "" if not math.isfinite(s.half_width) else f" ± {fmt(s.half_width)}"
        return f"{fmt(s.mean)}{half} (n={s.n})"
    return fmt_interval(s.mean, s.half_width, s.n, s.min, s.max) + f" (n={s.n})"


def cmp_text(c: Comparison) -> str:
    """`-3.1% [-4.0%, -2.2%], real` for b against baseline a."""
    if c.verdict in ("no data",):
        return "-"
    if not math.isfinite(c.rel_low):
        return f"{pct(c.rel_diff)} ({c.verdict})"
    return f"{pct(c.rel_diff)} [{pct(c.rel_low)}, {pct(c.rel_high)}], {c.verdict}"


def ratio_text(c: Comparison) -> str:
    """The ratio b / a of a comparison's means, with the Welch interval of the difference."""
    if c.verdict == "no data":
        return "-"
    return f"{1 + c.rel_diff:.3f} ({cmp_text(c)})"
