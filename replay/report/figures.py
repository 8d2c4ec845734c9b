"""The report's figures: drawn from the analysis, each saved as PNG and SVG, or skipped with why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from replay.analysis.compare import is_time
from replay.analysis.derived import TIER_PARAM
from replay.analysis.load import load_calls
from replay.plots import (
    ENGINE_METRICS,
    FigureContext,
    engine_comparison,
    hits_vs_pressure,
    makespan_vs_tier,
    prefill_vs_tier,
    restores_writes_vs_tier,
    save_figure,
    slot_timeline,
    ttft_cdf,
    ttft_s,
)
from replay.report.analyse import Analysis

__all__ = ["MAX_TTFT_RUNS", "draw_figures"]

MAX_TTFT_RUNS = 60  # beyond this, TTFT CDFs use the first repeat of each point only


def _representative_run(ok: pd.DataFrame) -> pd.Series | None:
    """The finished run whose makespan is closest to the median of all finished runs (None
    when there is none, or the runs were read from the summary table, with no run folders)."""
    if ok.empty or "run_dir" not in ok.columns:
        return None
    if "makespan_s" not in ok.columns or ok["makespan_s"].isna().all():
        return ok.iloc[0]
    makespan = pd.to_numeric(ok["makespan_s"], errors="coerce")
    return ok.loc[(makespan - makespan.median()).abs().idxmin()]  # type: ignore[call-overload]


def draw_figures(
    a: Analysis, ctx: FigureContext, out_dir: Path
) -> tuple[list[tuple[str, str, list[Path]]], dict[str, str]]:
    drawn: list[tuple[str, str, list[Path]]] = []
    skipped: dict[str, str] = {}

    def keep(stem: str, caption: str, fig: Any, why_not: str) -> None:
        if fig is None:
            skipped[caption] = why_not
            return
        drawn.append((stem, caption, save_figure(fig, out_dir, stem)))

    no_tier = f"the sweep does not vary `{TIER_PARAM}` (or no run finished)"
    keep(
        "1_makespan_vs_tier",
        "Figure 1: makespan vs host tier",
        makespan_vs_tier(a.agg, a.params, ctx, a.working_sets),
        no_tier,
    )
    keep(
        "2_prefill_vs_tier",
        "Figure 2: computed prefill vs host tier, measured and predicted",
        prefill_vs_tier(a.agg, a.params, ctx, a.predicted),
        no_tier,
    )
    keep(
        "3_restores_writes_vs_tier",
        "Figure 3: host restores and writes, write:read ratio",
        restores_writes_vs_tier(a.agg, a.params, ctx),
        no_tier + " or no host counters",
    )
    keep(
        "4_hits_vs_pressure",
        "Figure 4: hit fractions vs pressure ratio",
        hits_vs_pressure(a.agg, a.params, ctx),
        no_tier + ", or no working-set prediction or hit counters",
    )

    rep = _representative_run(a.ok)
    fig5 = None
    if rep is not None:
        label = f"{rep['point'] or 'run'} / {rep['repeat']}"
        fig5 = slot_timeline(load_calls(rep["run_dir"]), ctx, label)
    keep(
        "5_slot_timeline",
        "Figure 5: per-slot timeline of the median-makespan run",
        fig5,
        "no finished run with per-call timings",
    )

    ttft: dict[str, np.ndarray] = {}
    runs = a.ok if len(a.ok) <= MAX_TTFT_RUNS else a.ok.drop_duplicates("point")
    keys = [p for p in a.params if p in runs.columns]
    runs = runs.sort_values(keys, kind="stable") if keys else runs
    if "run_dir" in runs.columns:  # read from the summary table, there are no per-call files
        for point, group in runs.groupby("point", sort=False):
            ttft[str(point) or "run"] = np.concatenate(
                [ttft_s(load_calls(d)) for d in group["run_dir"]]
            )
    keep(
        "6_ttft_cdf",
        "Figure 6: TTFT distribution per point",
        ttft_cdf(ttft, ctx),
        "no per-call TTFT",
    )
    # engines timed on different clocks (the simulator's virtual seconds, a server's wall
    # seconds): their times are not drawn side by side, as "What is real" does not compare them
    apart = "clock" in a.ok.columns and a.ok["clock"].dropna().nunique() > 1
    metrics = [m for m in ENGINE_METRICS if not (apart and is_time(m))]
    caption = "Figure 7: engines at matched configuration"
    keep(
        "7_engines",
        caption + (" (token counts only: the engines ran on different clocks)" if apart else ""),
        engine_comparison(a.agg, a.params, ctx, metrics=metrics),
        "fewer than two engines ran a matched configuration",
    )
    return drawn, skipped
