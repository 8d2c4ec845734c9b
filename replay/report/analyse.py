"""The analysis a report prints: derived columns, aggregates, comparisons, predictions."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from replay.analysis.aggregate import aggregate
from replay.analysis.compare import all_comparisons
from replay.analysis.derived import TIER_PARAM, add_derived, pressure_ratio, recorded_makespan_s
from replay.analysis.load import Results, parse_point_name
from replay.analysis.predictions import compare_predictions, prediction_table, working_set_by_run
from replay.errors import ReplayError
from replay.trace.io import iter_calls

__all__ = ["VERDICT_METRICS", "Analysis", "analyse", "fixed_tiers"]

# Comparisons that go into "what is real": every factor on these metrics.
VERDICT_METRICS = ("makespan_s", "computed_prefill_tokens")


def _numeric_columns(runs: pd.DataFrame) -> list[str]:
    skip = {"repeat", "point", "status", "run_dir", "experiment"}
    cols = []
    for c in runs.columns:
        if c in skip:
            continue
        values = pd.to_numeric(runs[c], errors="coerce")
        if (
            values.notna().any()
            and runs[c].map(lambda v: isinstance(v, (int, float, np.number)) or v is None).all()
        ):
            cols.append(c)
    return cols


@dataclass
class Analysis:
    results: Results
    params: list[str]
    runs: pd.DataFrame  # every run, derived columns added
    ok: pd.DataFrame  # runs counted in the statistics
    agg: pd.DataFrame
    predicted: pd.DataFrame
    pred_errors: pd.DataFrame
    comparisons: pd.DataFrame
    working_sets: list[float]
    design: pd.DataFrame  # the parameters of every planned point (`planned_design`)


def analyse(results: Results) -> Analysis:
    params = list(results.params)
    runs = results.runs
    if "engine" not in params and "engine" in runs.columns and runs["engine"].nunique() > 1:
        params.append("engine")  # engines differ without being a matrix key: compare them too
    predicted = (
        prediction_table(results.predictions) if results.predictions is not None else pd.DataFrame()
    )
    if "recorded_makespan_s" not in runs.columns:
        runs = runs.assign(recorded_makespan_s=_recorded_makespans(runs))
    design = planned_design(results, runs, params)
    runs = add_derived(runs, params, design=design)
    runs["working_set_gib"] = working_set_by_run(runs, predicted, params)
    # a tier the sweep holds fixed (not a matrix key) is still each run's tier: the predictions
    # and the pressure ratio are per tier
    tiers = runs[TIER_PARAM] if TIER_PARAM in runs.columns else fixed_tiers(runs)
    if tiers.notna().any():
        runs["pressure_ratio"] = pressure_ratio(runs["working_set_gib"], tiers)
    ok = runs[runs["status"] == "ok"]
    metrics = [c for c in _numeric_columns(runs) if c not in params]
    agg = aggregate(ok, params, metrics)
    if TIER_PARAM in runs.columns or tiers.isna().all():
        pred_errors = compare_predictions(predicted, agg, params)
    else:
        keys = [*params, TIER_PARAM]
        by_tier = aggregate(ok.assign(**{TIER_PARAM: tiers[ok.index]}), keys, metrics)
        pred_errors = compare_predictions(predicted, by_tier, keys)
    comparisons = all_comparisons(ok, params, VERDICT_METRICS, design=design)
    ws = sorted({float(w) for w in runs["working_set_gib"].dropna().unique()})
    return Analysis(results, params, runs, ok, agg, predicted, pred_errors, comparisons, ws, design)


def fixed_tiers(runs: pd.DataFrame) -> pd.Series:
    """Each run's host tier (GiB) from the engine options it ran with (run.json's provenance), for
    a sweep that does not vary the tier; NaN where a run names none."""

    def tier(provenance: object) -> float:
        options = provenance.get("engine_options") if isinstance(provenance, dict) else None
        value = options.get(TIER_PARAM) if isinstance(options, dict) else None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return np.nan
        return float(value)

    column = (
        runs["provenance"] if "provenance" in runs.columns else pd.Series(None, index=runs.index)
    )
    return column.map(tier).astype(float)


def planned_design(results: Results, runs: pd.DataFrame, params: list[str]) -> pd.DataFrame:
    """The parameters of every point the sweep planned: its runs, whatever their status, and
    the planned runs that never started (their point names). Baselines are chosen and matched
    on this, so a failed or missing baseline leaves its rows uncompared instead of compared
    with another configuration."""
    cols = [p for p in params if p in runs.columns]
    never = [parse_point_name(rel.rsplit("/", 1)[0]) for rel in results.not_started]
    if not never:
        return runs[cols]
    planned = pd.DataFrame(never).reindex(columns=cols)
    return pd.concat([runs[cols], planned], ignore_index=True)


def _recorded_makespans(runs: pd.DataFrame) -> pd.Series:
    """Per run, how long the recorded run of its trace took, when the trace file is still where
    the run read it and has recorded call timings (NaN otherwise)."""
    cache: dict[str, float | None] = {}
    out = []
    for prov in runs.get("provenance", pd.Series([{}] * len(runs), index=runs.index)):
        path = prov.get("trace") if isinstance(prov, dict) else None
        if isinstance(path, str) and path not in cache:
            cache[path] = None
            # An unreadable trace only costs this one column.
            with contextlib.suppress(ReplayError, OSError):
                if Path(path).is_file():
                    calls = (c for _, c in iter_calls(path) if c is not None)
                    cache[path] = recorded_makespan_s(c.recorded for c in calls)
        value = cache.get(path) if isinstance(path, str) else None
        out.append(np.nan if value is None else value)
    return pd.Series(out, index=runs.index, dtype=float)
