"""Repeats -> per-point statistics: mean, std, min, max, 95% t-interval, coefficient of variation, n.

The interval is Student's t on the sample mean: mean ± t(0.975, n-1) · s / sqrt(n), with s the
sample standard deviation (ddof=1). One repeat gives a mean and no interval: never a false certainty.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

__all__ = ["STAT_COLUMNS", "Stats", "aggregate", "describe", "point_table"]

STAT_COLUMNS = ("n", "mean", "std", "min", "max", "ci_low", "ci_high", "half_width", "cv")


@dataclass(frozen=True)
class Stats:
    """Summary of one metric's repeats at one point. NaN where n is too small to say."""

    n: int
    mean: float
    std: float
    min: float
    max: float
    ci_low: float
    ci_high: float
    half_width: float
    cv: float  # std / |mean|


def describe(values: Iterable[float | None], confidence: float = 0.95) -> Stats:
    """Statistics of the finite values among `values` (None/NaN are not measurements)."""
    arr = np.asarray([v for v in values if v is not None], dtype=float)
    arr = arr[np.isfinite(arr)]
    n = int(arr.size)
    nan = math.nan
    if n == 0:
        return Stats(0, nan, nan, nan, nan, nan, nan, nan, nan)
    mean = float(arr.mean())
    lo, hi = float(arr.min()), float(arr.max())
    if n == 1:
        return Stats(1, mean, nan, lo, hi, nan, nan, nan, nan)
    std = float(arr.std(ddof=1))
    half = float(sps.t.ppf(0.5 + confidence / 2, n - 1)) * std / math.sqrt(n)
    cv = std / abs(mean) if mean != 0 else nan
    return Stats(n, mean, std, lo, hi, mean - half, mean + half, half, cv)


def aggregate(
    runs: pd.DataFrame,
    params: Sequence[str],
    metrics: Sequence[str],
    confidence: float = 0.95,
) -> pd.DataFrame:
    """Long table: one row per (point, metric) with the `STAT_COLUMNS`.

    `runs` should already hold only the runs to count (for example status ok). Points are the
    distinct combinations of `params`; a metric missing from `runs` is skipped.
    """
    metrics = [m for m in metrics if m in runs.columns]
    keys = [p for p in params if p in runs.columns]
    columns = [*keys, "metric", *STAT_COLUMNS]
    if runs.empty or not metrics:
        return pd.DataFrame(columns=columns)
    rows = []
    groups = runs.groupby(keys, dropna=False, sort=True) if keys else [((), runs)]
    for key, group in groups:
        key = key if isinstance(key, tuple) else (key,)
        for metric in metrics:
            values = pd.to_numeric(group[metric], errors="coerce").tolist()
            rows.append(
                {
                    **dict(zip(keys, key, strict=True)),
                    "metric": metric,
                    **asdict(describe(values, confidence)),
                }
            )
    return pd.DataFrame(rows, columns=columns)


def point_table(agg: pd.DataFrame, params: Sequence[str], stat: str = "mean") -> pd.DataFrame:
    """Wide view of `aggregate`'s output: one row per point, one column per metric's `stat`."""
    keys = [p for p in params if p in agg.columns]
    if agg.empty:
        return pd.DataFrame(columns=keys)
    if not keys:
        return agg.set_index("metric")[[stat]].T.reset_index(drop=True)
    # unstack, not pivot_table: only points that ran, never the cartesian product of the levels.
    wide = agg.set_index([*keys, "metric"])[stat].unstack("metric")
    wide.columns.name = None
    return wide.reset_index()
