"""Figure 7: engines side by side at matched configurations (every other parameter equal)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from replay.analysis.aggregate import point_table
from replay.counters import COMPUTED_PREFILL_TOKENS
from replay.plots.common import FigureContext, new_figure, series_label, spread_label

__all__ = ["ENGINE_METRICS", "engine_comparison"]

ENGINE_METRICS = {
    "makespan_s": "makespan (s)",
    COMPUTED_PREFILL_TOKENS: "computed prefill (tokens)",
    "ttft_p50_s": "TTFT p50 (s)",
}


def engine_comparison(
    agg: pd.DataFrame,
    params: Sequence[str],
    ctx: FigureContext,
    engine_param: str = "engine",
    metrics: Sequence[str] = tuple(ENGINE_METRICS),
) -> Figure | None:
    """One panel per metric; on x the configurations that at least two engines ran; one bar per
    engine with its 95% interval. None when fewer than two engines ran a matched configuration."""
    if engine_param not in agg.columns or agg.empty:
        return None
    metrics = [m for m in metrics if m in set(agg["metric"])]
    keys = [p for p in params if p in agg.columns]
    others = [p for p in keys if p != engine_param]
    mean = point_table(agg, keys, "mean")
    half = point_table(agg, keys, "half_width")
    counts = (
        mean.groupby(others, dropna=False)[engine_param].transform("nunique")
        if others
        else pd.Series(mean[engine_param].nunique(), index=mean.index)
    )
    mean, half = mean[counts >= 2], half[counts >= 2]
    if mean.empty or not metrics:
        return None
    engines = sorted(mean[engine_param].astype(str).unique())
    configs = (
        mean[others].drop_duplicates().reset_index(drop=True) if others else pd.DataFrame(index=[0])
    )
    labels = (
        [series_label({str(k): v for k, v in row.items()}) for _, row in configs.iterrows()]
        if others
        else ["matched"]
    )
    fig, axes = new_figure(ctx, "Engines at matched configuration", ncols=len(metrics))
    width = 0.8 / len(engines)
    for ax, metric in zip(axes, metrics, strict=True):
        for j, engine in enumerate(engines):
            heights, errs = [], []
            for _, cfg in configs.iterrows():
                sel = mean[engine_param].astype(str) == engine
                for p in others:
                    sel &= mean[p] == cfg[p]
                heights.append(
                    float(mean.loc[sel, metric].iloc[0]) if sel.any() and metric in mean else np.nan
                )
                errs.append(
                    float(half.loc[sel, metric].iloc[0]) if sel.any() and metric in half else np.nan
                )
            x = np.arange(len(configs)) - 0.4 + width * (j + 0.5)
            ax.bar(
                x,
                heights,
                width=width,
                yerr=errs,  # NaN: one repeat, no interval, no bar (not a bar of length 0)
                capsize=2,
                label=engine,
                color=f"C{j % 10}",
            )
        ax.set_xticks(range(len(configs)), labels, rotation=30, ha="right", fontsize=7)
        ax.set_ylabel(f"{ENGINE_METRICS.get(metric, metric)}, {spread_label(agg, [metric])}")
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8, title=engine_param)
    return fig
