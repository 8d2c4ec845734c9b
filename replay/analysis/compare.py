"""Is a difference between two configurations real? Welch's t-test on their repeats.

Verdicts: `real` (p < alpha), `within noise` (p >= alpha), `single repeat` (a side has one
measurement: the difference is shown but never called real), `no data`, `different clocks` (a
time measured in the in-process simulator's virtual seconds against one in wall seconds: no
difference is computed). Repeats that are
identical on both sides (a deterministic simulator) have zero noise: any difference is `real`,
none is `within noise`. The interval of the difference uses the Welch–Satterthwaite degrees of
freedom; its relative form divides by the baseline mean (the baseline's own uncertainty is left
out of that division, which the report states).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from replay.analysis.derived import baseline_matched_on

__all__ = [
    "REAL",
    "WITHIN_NOISE",
    "SINGLE_REPEAT",
    "NO_DATA",
    "DIFFERENT_CLOCKS",
    "Comparison",
    "all_comparisons",
    "compare_sides",
    "numeric_metrics",
    "compare_levels",
    "missing_baselines",
    "default_baselines",
    "is_time",
    "welch_compare",
]

REAL = "real"
WITHIN_NOISE = "within noise"
SINGLE_REPEAT = "single repeat"
NO_DATA = "no data"
DIFFERENT_CLOCKS = "different clocks"
METHOD = "Welch's t-test"


def is_time(metric: str) -> bool:
    """A metric in seconds, or per second: measured on a run's clock."""
    return metric.endswith(("_s", "_per_s"))


def _clocks(runs: pd.DataFrame) -> frozenset[str]:
    if "clock" not in runs.columns:
        return frozenset()
    return frozenset(str(c) for c in runs["clock"].dropna())


def _clocks_differ(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """Whether both sides say their clock and the clocks differ (runs written before runs
    recorded it say nothing, and compare as before)."""
    ca, cb = _clocks(a), _clocks(b)
    return bool(ca) and bool(cb) and ca != cb


def _judge(a: Iterable[Any], b: Iterable[Any], metric: str, alpha: float, apart: bool):
    """`welch_compare`, except for a time whose sides ran on different clocks: their means
    only, no difference, verdict `different clocks`."""
    if not (apart and is_time(metric)):
        return welch_compare(a, b, alpha)
    xa, xb = _finite(a), _finite(b)
    ma = float(xa.mean()) if xa.size else math.nan
    mb = float(xb.mean()) if xb.size else math.nan
    nan = math.nan
    return Comparison(
        int(xa.size), int(xb.size), ma, mb, nan, nan, nan, nan, nan, nan, nan, DIFFERENT_CLOCKS
    )


@dataclass(frozen=True)
class Comparison:
    """b minus a, where a is the baseline configuration."""

    n_a: int
    n_b: int
    mean_a: float
    mean_b: float
    diff: float  # mean_b - mean_a
    diff_low: float
    diff_high: float
    rel_diff: float  # diff / mean_a
    rel_low: float
    rel_high: float
    p_value: float
    verdict: str


def _finite(values: Iterable[Any]) -> np.ndarray:
    arr = pd.to_numeric(pd.Series(list(values), dtype=object), errors="coerce").to_numpy(
        dtype=float
    )
    return arr[np.isfinite(arr)]


def welch_compare(a: Iterable[Any], b: Iterable[Any], alpha: float = 0.05) -> Comparison:
    """Compare repeats `b` against baseline repeats `a` (two-sided, level `alpha`)."""
    xa, xb = _finite(a), _finite(b)
    na, nb = int(xa.size), int(xb.size)
    nan = math.nan
    if na == 0 or nb == 0:
        ma = float(xa.mean()) if na else nan
        mb = float(xb.mean()) if nb else nan
        return Comparison(na, nb, ma, mb, mb - ma, nan, nan, nan, nan, nan, nan, NO_DATA)
    ma, mb = float(xa.mean()), float(xb.mean())
    diff = mb - ma
    if na < 2 or nb < 2:
        rel = diff / ma if ma != 0 else nan
        return Comparison(na, nb, ma, mb, diff, nan, nan, rel, nan, nan, nan, SINGLE_REPEAT)
    va, vb = float(xa.var(ddof=1)), float(xb.var(ddof=1))
    se2 = va / na + vb / nb
    scale = max(abs(ma), abs(mb), 1.0)
    if se2 <= (1e-12 * scale) ** 2:
        # No measured noise on either side: the difference is exact.
        same = abs(diff) <= 1e-12 * scale
        p = 1.0 if same else 0.0
        low = high = diff
        verdict = WITHIN_NOISE if same else REAL
    else:
        se = math.sqrt(se2)
        dof = se2**2 / ((va / na) ** 2 / (na - 1) + (vb / nb) ** 2 / (nb - 1))
        t_crit = float(sps.t.ppf(1 - alpha / 2, dof))
        low, high = diff - t_crit * se, diff + t_crit * se
        p = float(2 * sps.t.sf(abs(diff) / se, dof))
        verdict = REAL if p < alpha else WITHIN_NOISE
    if ma != 0:
        rel, rel_low, rel_high = diff / ma, low / ma, high / ma
        if ma < 0:
            rel_low, rel_high = rel_high, rel_low
    else:
        rel = rel_low = rel_high = nan
    return Comparison(na, nb, ma, mb, diff, low, high, rel, rel_low, rel_high, p, verdict)


def default_baselines(runs: pd.DataFrame, params: Sequence[str]) -> dict[str, Any]:
    """Baseline level per parameter with at least two levels.

    Host tier: the smallest (no offload when present). Admission: `all` when present (plain
    offload). Anything else: the first level in sorted order.
    """
    out: dict[str, Any] = {}
    for p in params:
        if p not in runs.columns:
            continue
        levels = _sorted_levels(runs[p])
        if len(levels) < 2:
            continue
        if p == "admission" and "all" in levels:
            out[p] = "all"
        else:
            out[p] = levels[0]
    return out


def _sorted_levels(col: pd.Series) -> list[Any]:
    levels = list(col.dropna().unique())
    try:
        return sorted(levels)
    except TypeError:
        return sorted(levels, key=str)


def compare_levels(
    runs: pd.DataFrame,
    params: Sequence[str],
    factor: str,
    baseline: Any,
    metrics: Sequence[str],
    alpha: float = 0.05,
    design: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Each level of `factor` against `baseline`, at every combination of the other parameters.

    Rows: `factor`, `baseline`, `level`, the other parameters, `metric`, then the `Comparison`
    fields and `method`. `runs` should hold only the runs to count (status ok); `design` the
    parameters of every planned point (default: `runs`). A combination where no matching
    baseline run finished is skipped (`missing_baselines` names them).
    """
    metrics = [m for m in metrics if m in runs.columns]
    rows = []
    for at, group, base, _ in _against_baseline(runs, params, factor, baseline, design):
        if base.empty:
            continue
        for level in _sorted_levels(group[factor]):
            if level == baseline:
                continue
            other = group[group[factor] == level]
            apart = _clocks_differ(base, other)
            for metric in metrics:
                cmp = _judge(base[metric], other[metric], metric, alpha, apart)
                rows.append(
                    {
                        "factor": factor,
                        "baseline": baseline,
                        "level": level,
                        **at,
                        "metric": metric,
                        **asdict(cmp),
                        "method": METHOD,
                    }
                )
    return pd.DataFrame(rows)


def missing_baselines(
    runs: pd.DataFrame,
    params: Sequence[str],
    factor: str,
    baseline: Any,
    design: pd.DataFrame | None = None,
) -> list[dict[str, Any]]:
    """The settings (of the parameters the baseline is matched on) at which `factor` has
    finished runs off its baseline but no finished baseline run to compare them with
    (`compare_levels` skips them): a report names them instead of leaving the reader to notice
    a missing line."""
    out: dict[tuple, dict[str, Any]] = {}
    for at, group, base, match_on in _against_baseline(runs, params, factor, baseline, design):
        if base.empty and (group[factor] != baseline).any():
            where = {p: at[p] for p in match_on}
            out.setdefault(tuple(sorted(where.items())), where)
    return list(out.values())


def _against_baseline(
    runs: pd.DataFrame,
    params: Sequence[str],
    factor: str,
    baseline: Any,
    design: pd.DataFrame | None,
) -> Iterator[tuple[dict[str, Any], pd.DataFrame, pd.DataFrame, list[str]]]:
    """(the other parameters' values, their runs, the matching baseline runs, what the baseline
    is matched on) for every combination of the parameters other than `factor`."""
    design = runs if design is None else design
    others = [p for p in params if p != factor and p in runs.columns]
    all_base = runs[runs[factor] == baseline]
    match_on = baseline_matched_on(design, {factor: baseline}, others)
    groups: Iterable[tuple[Any, pd.DataFrame]]
    groups = runs.groupby(others, dropna=False, sort=True) if others else [((), runs)]
    for key, group in groups:
        key = key if isinstance(key, tuple) else (key,)
        at = dict(zip(others, key, strict=True))
        base = all_base
        for p in match_on:
            base = base[_equal(base[p], at[p])]
        yield at, group, base, match_on


def _equal(col: pd.Series, value: Any) -> pd.Series:
    if isinstance(value, float) and math.isnan(value):
        return col.isna()
    return col == value


def all_comparisons(
    runs: pd.DataFrame,
    params: Sequence[str],
    metrics: Sequence[str],
    baselines: Mapping[str, Any] | None = None,
    alpha: float = 0.05,
    design: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """`compare_levels` for every parameter that has a baseline, stacked into one table; the
    baselines and what they are matched on come from `design` (default: `runs`)."""
    design = runs if design is None else design
    baselines = default_baselines(design, params) if baselines is None else baselines
    frames = [
        compare_levels(runs, params, f, b, metrics, alpha, design) for f, b in baselines.items()
    ]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


# Columns of a run table that identify a run rather than measure it.
_NOT_METRICS = frozenset({"repeat", "seed", "pid", "pgid", "exit_code"})


def numeric_metrics(*tables: pd.DataFrame) -> list[str]:
    """Columns holding a number in at least one row of every table: the counters and latencies
    both sides measured (in the first table's column order)."""

    def numeric(t: pd.DataFrame) -> set[str]:
        return {
            c
            for c in t.columns
            if c not in _NOT_METRICS
            and t[c]
            .map(lambda v: isinstance(v, int | float | np.number) and not isinstance(v, bool))
            .any()
            and _finite(t[c]).size > 0
        }

    common = set.intersection(*(numeric(t) for t in tables)) if tables else set()
    return [c for c in tables[0].columns if c in common] if tables else []


def compare_sides(
    a: pd.DataFrame, b: pd.DataFrame, metrics: Sequence[str] | None = None, alpha: float = 0.05
) -> pd.DataFrame:
    """B against baseline A for every metric: one row per metric with the `Comparison` fields
    (difference, its interval, Welch's verdict). `a` and `b` hold one row per repeat."""
    metrics = numeric_metrics(a, b) if metrics is None else list(metrics)
    apart = _clocks_differ(a, b)
    rows = [
        {"metric": m, **asdict(_judge(a[m], b[m], m, alpha, apart)), "method": METHOD}
        for m in metrics
        if m in a.columns and m in b.columns
    ]
    return pd.DataFrame(rows)
