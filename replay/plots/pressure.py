"""Figure 4: device and host hit fractions against the pressure ratio (working set / host tier)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from replay.analysis.derived import TIER_PARAM
from replay.plots.common import FigureContext, legend_outside, new_figure, split_series, yerr

__all__ = ["hits_vs_pressure"]


def _minor_label(ax, v: float) -> str:
    """Every minor tick labelled within a decade or so; over a wider range only 2s and 5s."""
    low, high = ax.get_xlim()
    wide = low > 0 and high / low > 20
    return f"{v:g}" if not wide or f"{v:.0e}"[0] in "25" else ""


def hits_vs_pressure(agg: pd.DataFrame, params: Sequence[str], ctx: FigureContext) -> Figure | None:
    """Every pool, policy and tier in one picture: x is the point's pressure ratio (log scale),
    circles the device hit fraction, squares the host hit fraction. Tier 0 has no ratio."""
    metrics = set(agg["metric"]) if not agg.empty else set()
    if TIER_PARAM not in agg.columns or "pressure_ratio" not in metrics:
        return None
    if not {"device_hit_fraction", "host_hit_fraction"} & metrics:
        return None
    fig, (ax,) = new_figure(ctx, "Hit fractions vs pressure ratio")
    drawn = False
    for i, s in enumerate(split_series(agg, params, TIER_PARAM)):
        x = s.mean["pressure_ratio"].to_numpy(dtype=float)
        keep = np.isfinite(x) & (x > 0)
        if not keep.any():
            continue
        color = f"C{i % 10}"
        for metric, marker, style, what in (
            ("device_hit_fraction", "o", "-", "device"),
            ("host_hit_fraction", "s", "--", "host"),
        ):
            if metric not in s.mean:
                continue
            order = np.argsort(x[keep])
            ax.errorbar(
                x[keep][order],
                s.mean[metric].to_numpy(dtype=float)[keep][order],
                yerr=yerr(s, metric)[keep][order],
                color=color,
                marker=marker,
                linestyle=style,
                capsize=3,
                label=f"{what} hits: {s.label}",
            )
            drawn = True
    if not drawn:
        return None
    ax.axvline(1.0, color="0.3", linestyle=":", label="working set = tier")
    ax.set_xscale("log")
    # plain numbers (0.4, 2) rather than matplotlib's 4x10^-1 on a log axis's minor ticks
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax.xaxis.set_major_formatter(plain)
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: _minor_label(ax, v)))
    ax.set_xlabel("pressure ratio (working set / host tier), log scale")
    ax.set_ylabel("fraction of prompt tokens")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3, which="both")
    legend_outside(ax)
    return fig
