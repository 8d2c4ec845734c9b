"""Shared figure plumbing: Agg-only figures (no pyplot state), footer, series, PNG+SVG output.

Figures are built on `matplotlib.figure.Figure` directly, so nothing here touches a global
backend or keeps figures alive after saving; every figure function returns its Figure so tests
can read the plotted data back from the artists.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from replay import __version__
from replay.analysis.aggregate import point_table

__all__ = [
    "FigureContext",
    "Series",
    "legend_outside",
    "new_figure",
    "save_figure",
    "series_label",
    "split_series",
    "spread_label",
    "yerr",
]

FOOTER_FONTSIZE = 7
SAVE_FORMATS = ("png", "svg")


@dataclass(frozen=True)
class FigureContext:
    """What every figure shows in its footer: the experiment and the date it ran."""

    experiment: str
    date: str  # ISO date of the runs (or of the report when the runs carry none)

    def footer(self) -> str:
        return f"{self.experiment} · {self.date} · replay {__version__}"


def new_figure(
    ctx: FigureContext, title: str, ncols: int = 1, width_in: float = 7.5, height_in: float = 4.8
) -> tuple[Figure, list[Any]]:
    """A titled figure with `ncols` axes side by side and the experiment footer."""
    fig = Figure(figsize=(width_in * (1 + 0.55 * (ncols - 1)), height_in), layout="constrained")
    axes = list(np.atleast_1d(fig.subplots(1, ncols)))
    fig.suptitle(title)
    # Footer as a supxlabel keeps constrained layout aware of it, so it never overlaps the axes.
    fig.supxlabel(ctx.footer(), fontsize=FOOTER_FONTSIZE, color="0.35", x=0.01, ha="left")
    return fig, axes


def save_figure(
    fig: Figure, out_dir: Path, stem: str, formats: Sequence[str] = SAVE_FORMATS
) -> list[Path]:
    """Write `stem.png` and `stem.svg` under `out_dir`, each whole or not at all (a full disk or
    Ctrl-C left a partial figure's temp file beside them)."""
    from replay.sweep.results import write_bytes_atomic

    paths = []
    for fmt in formats:
        path = out_dir / f"{stem}.{fmt}"
        drawn = io.BytesIO()
        fig.savefig(drawn, format=fmt, dpi=120)
        write_bytes_atomic(path, drawn.getvalue())
        paths.append(path)
        # The layout is solved by the first save; keep it rather than solving it again per format.
        fig.set_layout_engine("none")
    return paths


def series_label(values: dict[str, Any]) -> str:
    """`admission=all, engine=sim`; `all points` when the sweep has one series."""
    return ", ".join(f"{k}={v}" for k, v in values.items()) or "all points"


@dataclass(frozen=True)
class Series:
    """One line of a figure: the points sharing every parameter but `x`, sorted by `x`."""

    label: str
    params: dict[str, Any]
    mean: pd.DataFrame  # one row per x value: the x column plus one column per metric
    half_width: pd.DataFrame  # same shape: 95% interval half-widths (NaN with one repeat)
    n: pd.DataFrame


def split_series(agg: pd.DataFrame, params: Sequence[str], x: str) -> Iterator[Series]:
    """Split `aggregate`'s long table into series along parameter `x`."""
    keys = [p for p in params if p in agg.columns]
    if agg.empty or x not in keys:
        return
    tables = {stat: point_table(agg, keys, stat) for stat in ("mean", "half_width", "n")}
    others = [p for p in keys if p != x]
    mean = tables["mean"]
    groups = mean.groupby(others, dropna=False, sort=True) if others else [((), mean)]
    for key, group in groups:
        key = key if isinstance(key, tuple) else (key,)
        values = dict(zip(others, key, strict=True))
        idx = group.sort_values(x).index
        yield Series(
            label=series_label(values),
            params=values,
            mean=tables["mean"].loc[idx].reset_index(drop=True),
            half_width=tables["half_width"].loc[idx].reset_index(drop=True),
            n=tables["n"].loc[idx].reset_index(drop=True),
        )


LEGEND_ROWS = 14  # entries a legend column holds beside a 4.8-inch-high figure at font size 7


def legend_outside(ax: Any, **kwargs: Any) -> None:
    """Legend right of the axes: inside, it would hide data points once a sweep has a few series.
    Past `LEGEND_ROWS` entries it takes more columns and the figure grows wider by as much: one
    column of 40 ran off the figure, and constrained layout gave up on it."""
    handles = ax.get_legend_handles_labels()[0]
    if not handles:
        return
    ncol = -(-len(handles) // LEGEND_ROWS)
    if ncol > 1 and "ncol" not in kwargs:
        fig = ax.get_figure()
        fig.set_figwidth(fig.get_figwidth() + 1.8 * (ncol - 1))
        kwargs["ncol"] = ncol
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, **kwargs)


def spread_label(agg: pd.DataFrame, metrics: Sequence[str]) -> str:
    """What the bars of an axis are: "mean ± 95% CI" where some point of `metrics` has two or
    more repeats, else "one run a point, no interval" (no bar is drawn for one repeat)."""
    rows = agg[agg["metric"].isin(list(metrics))] if not agg.empty else agg
    repeated = not rows.empty and "n" in rows.columns and bool((rows["n"] >= 2).any())
    return "mean ± 95% CI" if repeated else "one run a point, no interval"


def yerr(series: Series, metric: str) -> np.ndarray:
    """Error-bar lengths: the 95% half-width, NaN (no bar drawn) where one repeat gives no
    interval: a bar of length 0 would draw a point as exact, with no noise."""
    if metric not in series.half_width:
        return np.full(len(series.mean), np.nan)
    return series.half_width[metric].to_numpy(dtype=float)
