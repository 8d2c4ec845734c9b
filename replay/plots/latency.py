"""Figure 6: time-to-first-token distribution (empirical CDF) per point, repeats pooled."""

from __future__ import annotations

from collections.abc import Mapping

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from replay.plots.common import FigureContext, legend_outside, new_figure
from replay.status import CallStatus

__all__ = ["MAX_CDF_LINES", "ttft_cdf", "ttft_s"]

MAX_CDF_POINTS = 2000  # per line, evenly spaced in rank (first and last kept)
MAX_CDF_LINES = 24  # past this the legend stops being readable; the rest are listed as omitted


def ttft_s(calls: pd.DataFrame) -> np.ndarray:
    """TTFT of each successful call: t_first_token - t_send (seconds)."""
    if calls.empty or not {"t_send", "t_first_token"} <= set(calls.columns):
        return np.array([], dtype=float)
    ok = (
        calls["status"].eq(CallStatus.OK)
        if "status" in calls.columns
        else pd.Series(True, index=calls.index)
    )
    values = (calls.loc[ok, "t_first_token"] - calls.loc[ok, "t_send"]).to_numpy(dtype=float)
    return values[np.isfinite(values)]


def ttft_cdf(ttft_by_point: Mapping[str, np.ndarray], ctx: FigureContext) -> Figure | None:
    """One step line per point: fraction of calls with TTFT at most x. Log x when TTFTs span
    more than two decades."""
    items = [
        (label, np.sort(np.asarray(v, dtype=float))) for label, v in ttft_by_point.items() if len(v)
    ]
    if not items:
        return None
    fig, (ax,) = new_figure(ctx, "Time to first token, CDF per point")
    drawn = items
    if len(items) > MAX_CDF_LINES:
        # evenly spaced in point order (the matrix's): the first 24 of 50 points showed only
        # the smallest host tiers, where nothing changes
        pick = np.unique(np.linspace(0, len(items) - 1, MAX_CDF_LINES).round().astype(int))
        drawn = [items[i] for i in pick]
    # 20 colours, then the same with dashes: no two of 24 lines look alike
    tab20 = matplotlib.colormaps["tab20"]
    colours = [tab20(i) for i in range(tab20.N)]
    for i, (label, values) in enumerate(drawn):
        # Start at (min, 0) so each curve rises from zero at its fastest call.
        x = np.concatenate([values[:1], values])
        frac = np.arange(0, len(values) + 1) / len(values)
        if len(x) > MAX_CDF_POINTS:
            # Thousands of steps per line draw the same picture as a couple of thousand.
            keep = np.unique(np.linspace(0, len(x) - 1, MAX_CDF_POINTS).round().astype(int))
            x, frac = x[keep], frac[keep]
        ax.step(
            x, frac, where="post", label=f"{label} (n={len(values)})",
            color=colours[i % len(colours)], linestyle="-" if i < len(colours) else "--",
        )  # fmt: skip
    if len(drawn) < len(items):
        ax.set_title(
            f"{len(drawn)} of {len(items)} points drawn, evenly spaced in point order", fontsize=8
        )
    positive = np.concatenate([v[v > 0] for _, v in items])
    wide = bool(positive.size and positive.max() / positive.min() > 100)
    if wide:
        ax.set_xscale("log")
    ax.set_xlabel("TTFT (s), log scale" if wide else "TTFT (s)")
    ax.set_ylabel("fraction of calls")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    legend_outside(ax)
    return fig
