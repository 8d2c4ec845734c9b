"""The report's measured tables, pre-registered predictions and prediction errors."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from replay.analysis.derived import TIER_PARAM
from replay.analysis.predictions import PREDICTED_QUANTITIES, prediction_groups, skipped_predictions
from replay.analysis.words import METRIC_NAMES, fmt_interval, fmt_num, fmt_point
from replay.report.analyse import Analysis
from replay.report.markdown import md_table, plain, text

__all__ = [
    "TIME_COLUMNS",
    "TOKEN_COLUMNS",
    "PREDICTION_FACTS",
    "measured_tables",
    "predictions_section",
    "prediction_errors",
]

TIME_COLUMNS = (
    "makespan_s",
    "study_makespan_s",  # runs written before it existed lack it: then no column
    "relative_makespan",
    "slowdown_vs_recorded",
    "ttft_p50_s",
    "ttft_p99_s",
    "jct_p50_s",
)
TOKEN_COLUMNS = (
    "computed_prefill_tokens",
    "host_restore_tokens",
    "host_write_tokens",
    "write_read_ratio",
    "device_hit_fraction",
    "host_hit_fraction",
    "evicted_unread_fraction",
)
# Scalars of a prediction printed above its table, when present.
PREDICTION_FACTS = (
    "model",
    "order",
    "pool",
    "calls",
    "prompt_tokens",
    "mean_prompt_tokens",
    "bytes_per_token",
    "chunk_tokens",
    "device_tokens",
    "working_set_gib",
    "offload_pays_from_gib",
)


def _points(a: Analysis) -> pd.DataFrame:
    """The points measured, then every other planned point (no run of it finished ok): its row
    says n = 0 rather than leaving the point out of the table."""
    keys = [p for p in a.params if p in a.agg.columns]
    if a.agg.empty:
        return pd.DataFrame(columns=keys)
    if not keys:
        return pd.DataFrame(index=[0])
    measured = a.agg[keys].drop_duplicates()
    planned = a.design.reindex(columns=keys).drop_duplicates()
    seen = {tuple(map(str, r)) for r in measured.itertuples(index=False)}
    missing = [tuple(map(str, r)) not in seen for r in planned.itertuples(index=False)]
    return pd.concat([measured, planned[missing]], ignore_index=True)


def _stat(a: Analysis, point: pd.Series, metric: str) -> pd.Series | None:
    sel = a.agg["metric"] == metric
    for k, v in point.items():
        sel &= (a.agg[k] == v) | (a.agg[k].isna() & pd.isna(v))
    hit = a.agg[sel]
    return None if hit.empty else hit.iloc[0]


def _column_name(metric: str) -> str:
    """The metric's words, with its unit when it is a time (`..._s`)."""
    name = METRIC_NAMES.get(metric, metric)
    return f"{name} (s)" if metric.endswith("_s") else name


def measured_tables(a: Analysis) -> list[str]:
    lines: list[str] = []
    points = _points(a)
    if a.agg.empty:
        return ["No run finished cleanly: nothing to aggregate.", ""]
    present = set(a.agg["metric"])
    if TIER_PARAM in a.design.columns and a.design[TIER_PARAM].nunique() > 1:
        present.add("relative_makespan")  # planned: `-` where no baseline run finished
    for title, candidates in (("Time", TIME_COLUMNS), ("Tokens", TOKEN_COLUMNS)):
        columns = [c for c in candidates if c in present]
        if not columns:
            continue
        header = [*points.columns, "n", *(_column_name(c) for c in columns)]
        rows = []
        for _, point in points.iterrows():
            stats = [_stat(a, point, c) for c in columns]
            n = max((int(s["n"]) for s in stats if s is not None), default=0)
            cells = [
                fmt_interval(s["mean"], s["half_width"], s["n"], s["min"], s["max"], show_n=False)
                + _fewer(int(s["n"]), n)
                if s is not None
                else "-"
                for s in stats
            ]
            rows.append([*(plain(v) for v in point.to_numpy()), n, *cells])
        lines += [
            f"**{title}** (mean ± 95% t-interval half-width [min–max] over repeats; a point with "
            "one repeat has no interval; `(n=K)`: a cell from fewer runs than the row's n, where "
            "some runs did not give that number; n = 0: no run of the point finished ok, see "
            "Runs)",
            "",
        ]
        lines += md_table(header, rows)
    if "study_makespan_s" in present:
        lines += [
            "`makespan` runs from the first send to the last response; `study makespan` is the "
            "EfficientAgent study's: from the run's start (before the first call's gap) to the "
            "end of the last task's tail gap.",
            "",
        ]
    cv = a.agg[a.agg["metric"] == "makespan_s"]["cv"].dropna()
    if not cv.empty:
        lines += [
            f"Makespan coefficient of variation across repeats: median {cv.median() * 100:.2f}%, max {cv.max() * 100:.2f}%.",
            "",
        ]
    return lines


def predictions_section(a: Analysis) -> list[str]:
    if a.results.predictions is None:
        broken = [n for n in a.results.notes if n.startswith("predictions.json: ")]
        if broken:  # there, but it does not read: the predictions are lost, not absent
            return [f"`{broken[0]}`: no prediction can be compared.", ""]
        return ["No `predictions.json` in this results directory: nothing was pre-registered.", ""]
    skipped = [
        f"- not predicted: {text(why)}" for why in skipped_predictions(a.results.predictions)
    ]
    skipped += [""] if skipped else []
    if a.predicted.empty:
        return [
            "`predictions.json` is present but holds no per-tier prediction this report can read.",
            "",
            *skipped,
        ]
    lines = [
        "Registered before any point ran (`predictions.json`); a run never rewrites it.",
        "",
        *skipped,
    ]
    for params, pred in prediction_groups(a.results.predictions):
        facts = [f"{k} {_fact(pred[k])}" for k in PREDICTION_FACTS if pred.get(k) is not None]
        lines += [f"**{fmt_point(params) or 'all points'}**: " + ", ".join(facts) + ".", ""]
        tiers = [t for t in pred["tiers"] if isinstance(t, dict)]
        cols = [
            c
            for c in (TIER_PARAM, "pressure_ratio", *PREDICTED_QUANTITIES)
            if any(c in t for t in tiers)
        ]
        # the tier as the measured tables name it (0.00390625, not fmt_num's 0.003906)
        lines += md_table(
            cols,
            [
                [plain(t.get(c)) if c == TIER_PARAM else fmt_num(t.get(c)) for c in cols]
                for t in tiers
            ],
        )
    return lines


def _fact(v: Any) -> str:
    if isinstance(v, (int, float, np.number)) and not isinstance(v, bool):
        return fmt_num(v)
    return str(v)


def prediction_errors(a: Analysis) -> list[str]:
    e = a.pred_errors
    if e.empty:
        return [
            "No measured point matches a prediction (tier and group parameters), so no errors to show.",
            "",
        ]
    # the tier too where the sweep held it fixed (`analyse` matched the predictions on it)
    keys = [c for c in e.columns if c in a.params or c == TIER_PARAM]
    header = [*keys, "quantity", "predicted [range]", "measured (95% CI)", "n", "error", "agrees"]
    rows = []
    for _, r in e.iterrows():
        inside = "-" if pd.isna(r["within_interval"]) else ("yes" if r["within_interval"] else "no")
        low, high = r.get("predicted_low", math.nan), r.get("predicted_high", math.nan)
        span = "" if pd.isna(low) or pd.isna(high) else f" [{fmt_num(low)}–{fmt_num(high)}]"
        measured = fmt_num(r["measured"]) + (
            "" if pd.isna(r["ci_low"]) else f" [{fmt_num(r['ci_low'])}–{fmt_num(r['ci_high'])}]"
        )
        err = "-" if pd.isna(r["rel_error"]) else f"{r['rel_error'] * 100:+.1f}%"
        rows.append(
            [
                *(plain(r[k]) for k in keys),
                r["quantity"],
                fmt_num(r["predicted"]) + span,
                measured,
                int(r["n"]),
                err,
                inside,
            ]
        )
    lines = [
        "Error = (point prediction − measured) / measured. Agrees: the pre-registered range "
        "overlaps the measured 95% interval (docs/model.md, Ranges), or with one repeat (no "
        "interval) contains the measured value; a prediction without a range: the point lies "
        "inside the interval (`-` with one repeat).",
        "",
    ]
    return lines + md_table(header, rows)


def _fewer(cell_n: int, row_n: int) -> str:
    """` (n=K)` when a cell counts fewer runs than its row's n column says."""
    return f" (n={cell_n})" if 0 < cell_n < row_n else ""
