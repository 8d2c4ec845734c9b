"""Pre-registered predictions next to what was measured, per host tier, with relative errors.

`predictions.json` holds one prediction per point group (the non-tier matrix parameters); a
prediction is a dict with a `tiers` list of per-tier rows (`host_tier_gib`,
`computed_prefill_tokens`, `host_restore_tokens`, `host_write_tokens`, `host_coverage_tokens`)
and scalars such as `working_set_gib`. The reader is tolerant of how the groups are wrapped: a
bare prediction, a list, a dict keyed by `k=v,...` names, or entries carrying their parameters
under `params`/`point`/`group`/`key`. Whatever is missing is skipped, never invented.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from replay.analysis.derived import TIER_PARAM
from replay.analysis.load import parse_point_name
from replay.counters import COMPUTED_PREFILL_TOKENS

__all__ = [
    "PREDICTED_QUANTITIES",
    "agrees",
    "compare_predictions",
    "prediction_groups",
    "prediction_table",
    "relative_error",
    "skipped_predictions",
    "working_set_by_run",
]

PREDICTED_QUANTITIES = (
    COMPUTED_PREFILL_TOKENS,
    "host_restore_tokens",
    "host_write_tokens",
    "host_coverage_tokens",
    "device_hit_tokens",  # per tier when the model predicts the device-resident prefix
)
_PARAM_FIELDS = ("params", "point", "group", "key", "matrix")


def relative_error(predicted: Any, measured: Any) -> Any:
    """(predicted - measured) / measured: positive when the model predicted too much."""
    predicted = np.asarray(predicted, dtype=float)
    measured = np.asarray(measured, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(measured == 0, np.nan, (predicted - measured) / measured)
    return float(out) if out.ndim == 0 else out


def _as_params(value: Any) -> dict[str, Any] | None:
    if isinstance(value, Mapping):
        return {str(k): v for k, v in value.items() if not isinstance(v, (Mapping, list))}
    if isinstance(value, str) and "=" in value:
        return parse_point_name(value)
    return None


def prediction_groups(
    obj: Any, _params: Mapping[str, Any] | None = None
) -> list[tuple[dict[str, Any], dict]]:
    """Every prediction found in `obj`, as (group parameters, prediction dict)."""
    params = dict(_params or {})
    found: list[tuple[dict[str, Any], dict]] = []
    if isinstance(obj, Mapping):
        for name in _PARAM_FIELDS:
            extra = _as_params(obj.get(name))
            if extra:
                params = {**params, **extra}
        if isinstance(obj.get("tiers"), list):
            return [(params, dict(obj))]
        for key, value in obj.items():
            if key in _PARAM_FIELDS or key == "inputs":
                continue  # parameters and model inputs, not predictions
            if isinstance(value, (Mapping, list)):
                extra = _as_params(key) or {}
                found.extend(prediction_groups(value, {**params, **extra}))
    elif isinstance(obj, list):
        for value in obj:
            found.extend(prediction_groups(value, params))
    return found


def skipped_predictions(obj: Any) -> list[str]:
    """Why a group has no prediction: every `skipped` reason found, with the group's key if any."""
    out: list[str] = []
    if isinstance(obj, Mapping):
        if isinstance(obj.get("skipped"), str):
            key = obj.get("key")
            out.append(f"{key}: {obj['skipped']}" if isinstance(key, str) else obj["skipped"])
        for value in obj.values():
            if isinstance(value, (Mapping, list)):
                out.extend(skipped_predictions(value))
    elif isinstance(obj, list):
        for value in obj:
            out.extend(skipped_predictions(value))
    return out


def prediction_table(obj: Any) -> pd.DataFrame:
    """One row per (group, tier): group parameters, `host_tier_gib`, the predicted quantities and
    the prediction's scalar fields (e.g. `working_set_gib`, `pressure_ratio` when per tier)."""
    rows = []
    for params, pred in prediction_groups(obj):
        scalars = {
            k: v
            for k, v in pred.items()
            if k != "tiers" and isinstance(v, (int, float, str, bool)) and k not in params
        }
        for tier in pred["tiers"]:
            if not isinstance(tier, Mapping) or TIER_PARAM not in tier:
                continue
            rows.append(
                {
                    **params,
                    **scalars,
                    **{k: v for k, v in tier.items() if not isinstance(v, (Mapping, list))},
                }
            )
    return pd.DataFrame(rows)


def _same(a: Any, b: Any) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9)
    except (TypeError, ValueError):
        return str(a) == str(b)


def compare_predictions(
    predicted: pd.DataFrame,
    measured: pd.DataFrame,
    params: Sequence[str],
    quantities: Sequence[str] = PREDICTED_QUANTITIES,
) -> pd.DataFrame:
    """Join predictions with measured statistics (the long output of `aggregate`).

    A measured point matches a prediction row when the tiers are equal and every prediction group
    parameter that is also a matrix parameter is equal; group parameters the sweep did not vary
    are ignored. Rows: the point's parameters, `quantity`, `predicted` (the point estimate),
    `predicted_low` / `predicted_high` (the pre-registered range, NaN when the prediction has
    none), `measured` (mean), `n`, `ci_low`, `ci_high`, `rel_error` ((predicted - measured) /
    measured) and `within_interval`: with a range, whether it overlaps the measured 95% interval
    (the mean with one repeat); without one, whether the point lies inside the interval (NaN with
    one repeat).
    """
    keys = [p for p in params if p in measured.columns]
    columns = [
        *keys,
        "quantity",
        "predicted",
        "predicted_low",
        "predicted_high",
        "measured",
        "n",
        "ci_low",
        "ci_high",
        "rel_error",
        "within_interval",
    ]
    if (
        predicted.empty
        or measured.empty
        or TIER_PARAM not in predicted.columns
        or TIER_PARAM not in keys
    ):
        return pd.DataFrame(columns=columns)
    group_keys = [k for k in keys if k in predicted.columns and k != TIER_PARAM]
    rows = []
    points = measured[keys].drop_duplicates()
    for _, point in points.iterrows():
        match = predicted[[_same(t, point[TIER_PARAM]) for t in predicted[TIER_PARAM]]]
        for k in group_keys:
            match = match[[_same(v, point[k]) for v in match[k]]]
        if match.empty:
            continue
        pred_row = match.iloc[0]
        here = measured
        for k in keys:
            here = here[[_same(v, point[k]) for v in here[k]]]
        for q in quantities:
            if q not in pred_row.index or pd.isna(pred_row[q]):
                continue
            stat = here[here["metric"] == q]
            if stat.empty or stat["n"].iloc[0] == 0:
                continue
            s = stat.iloc[0]
            p = float(pred_row[q])
            low, high = _range(pred_row, q)
            rows.append(
                {
                    **{k: point[k] for k in keys},
                    "quantity": q,
                    "predicted": p,
                    "predicted_low": low,
                    "predicted_high": high,
                    "measured": float(s["mean"]),
                    "n": int(s["n"]),
                    "ci_low": s["ci_low"],
                    "ci_high": s["ci_high"],
                    "rel_error": relative_error(p, s["mean"]),
                    "within_interval": agrees(
                        p, low, high, s["mean"], s["ci_low"], s["ci_high"], s["n"]
                    ),
                }
            )
    return pd.DataFrame(rows, columns=columns)


def _range(row: pd.Series, quantity: str) -> tuple[float, float]:
    """The prediction's pre-registered (low, high) for `quantity`; NaNs when it has none."""
    try:
        low, high = float(row[f"{quantity}_low"]), float(row[f"{quantity}_high"])
    except (KeyError, TypeError, ValueError):
        return math.nan, math.nan
    if math.isnan(low) or math.isnan(high):
        return math.nan, math.nan
    return min(low, high), max(low, high)


def agrees(
    predicted: float,
    low: float,
    high: float,
    mean: float,
    ci_low: float,
    ci_high: float,
    n: int,
) -> bool | float:
    """The verdict of a prediction against a measurement (True, False, or NaN: cannot tell).

    With a range [low, high]: it overlaps the measured 95% interval [ci_low, ci_high] (with one
    repeat, no interval: it contains the mean). Without one: the point lies inside the interval
    (NaN with one repeat).
    """
    has_ci = n >= 2 and not (pd.isna(ci_low) or pd.isna(ci_high))
    if not (math.isnan(low) or math.isnan(high)):
        if has_ci:
            return bool(low <= ci_high and ci_low <= high)
        return bool(low <= mean <= high) if n >= 1 and not pd.isna(mean) else math.nan
    return bool(ci_low <= predicted <= ci_high) if has_ci else math.nan


def working_set_by_run(
    runs: pd.DataFrame, predicted: pd.DataFrame, params: Sequence[str]
) -> pd.Series:
    """Each run's predicted working set (GiB), from the prediction of its point group (NaN if none)."""
    out = pd.Series(np.nan, index=runs.index, dtype=float)
    if predicted.empty or "working_set_gib" not in predicted.columns:
        return out
    group_keys = [
        k for k in params if k in predicted.columns and k in runs.columns and k != TIER_PARAM
    ]
    groups = predicted.drop_duplicates(subset=[*group_keys, "working_set_gib"])
    for _, g in groups.iterrows():
        sel = pd.Series(True, index=runs.index)
        for k in group_keys:
            sel &= runs[k].map(lambda v, want=g[k]: _same(v, want))
        out[sel & out.isna()] = float(g["working_set_gib"])
    distinct = predicted["working_set_gib"].dropna().unique()
    if len(distinct) == 1:
        # One workload, one working set: groups the model skipped (say, another admission policy)
        # share it, since admission does not change what the pool reuses.
        out = out.fillna(float(distinct[0]))
    return out
