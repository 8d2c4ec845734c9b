"""Figures along the host tier: makespan (1), computed prefill vs prediction (2), restores and
writes with the write:read ratio (3)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from replay.analysis.derived import TIER_PARAM
from replay.counters import COMPUTED_PREFILL_TOKENS
from replay.plots.common import (
    FigureContext,
    legend_outside,
    new_figure,
    series_label,
    split_series,
    spread_label,
    yerr,
)

__all__ = ["makespan_vs_tier", "prefill_vs_tier", "restores_writes_vs_tier"]

TIER_LABEL = "host tier (GiB per rank)"
MAX_TIER_LABELS = 12  # x labels on figure 2's categorical axis


def _tiers(agg: pd.DataFrame) -> list[float]:
    return sorted(pd.to_numeric(agg[TIER_PARAM], errors="coerce").dropna().unique().tolist())


def makespan_vs_tier(
    agg: pd.DataFrame,
    params: Sequence[str],
    ctx: FigureContext,
    working_set_gib: Sequence[float] = (),
) -> Figure | None:
    """Figure 1: mean makespan per tier, one line per policy/engine/pool, 95% interval bars, and
    the working-set estimate as a vertical line."""
    if TIER_PARAM not in agg.columns or "makespan_s" not in set(agg["metric"]):
        return None
    fig, (ax,) = new_figure(ctx, "Makespan vs host tier")
    for s in split_series(agg, params, TIER_PARAM):
        ax.errorbar(
            s.mean[TIER_PARAM],
            s.mean["makespan_s"],
            yerr=yerr(s, "makespan_s"),
            marker="o",
            capsize=3,
            label=s.label,
        )
    for i, ws in enumerate(sorted(set(working_set_gib))):
        ax.axvline(
            ws, color="0.3", linestyle=":", label="working set (predicted)" if i == 0 else None
        )
    ax.set_xlabel(TIER_LABEL)
    ax.set_ylabel(f"makespan (s), {spread_label(agg, ['makespan_s'])}")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    legend_outside(ax)
    return fig


def prefill_vs_tier(
    agg: pd.DataFrame,
    params: Sequence[str],
    ctx: FigureContext,
    predicted: pd.DataFrame | None = None,
) -> Figure | None:
    """Figure 2: measured computed prefill per tier as bars (one per series, 95% interval) and the
    pre-registered prediction as a line over the same tiers."""
    metric = COMPUTED_PREFILL_TOKENS
    if TIER_PARAM not in agg.columns or metric not in set(agg["metric"]):
        return None
    tiers = _tiers(agg)
    pos = {t: i for i, t in enumerate(tiers)}
    series = list(split_series(agg, params, TIER_PARAM))
    fig, (ax,) = new_figure(ctx, "Computed prefill vs host tier: measured and predicted")
    width = 0.8 / max(len(series), 1)
    for j, s in enumerate(series):
        x = np.array([pos[float(t)] for t in s.mean[TIER_PARAM]]) - 0.4 + width * (j + 0.5)
        ax.bar(
            x,
            s.mean[metric],
            width=width,
            yerr=yerr(s, metric),
            capsize=2,
            label=f"measured: {s.label}",
        )
    if predicted is not None and not predicted.empty and metric in predicted.columns:
        for j, (label, xs, ys) in enumerate(_prediction_lines(predicted, params, metric, pos)):
            ax.plot(
                xs,
                ys,
                color="k",
                marker="Dos^v"[j % 5],
                linestyle="--",
                label=f"predicted: {label}",
            )
    # a tick per tier, a label on every k-th: 50 tiers' labels ran together into one smear
    step = -(-len(tiers) // MAX_TIER_LABELS)
    ax.set_xticks(
        range(len(tiers)), [f"{t:g}" if i % step == 0 else "" for i, t in enumerate(tiers)]
    )
    ax.set_xlabel(TIER_LABEL)
    ax.set_ylabel("computed prefill (tokens)")
    ax.grid(axis="y", alpha=0.3)
    legend_outside(ax)
    return fig


def _prediction_lines(
    predicted: pd.DataFrame, params: Sequence[str], metric: str, pos: dict[float, int]
) -> list[tuple[str, list[int], list[float]]]:
    """One line per distinct predicted series; groups with identical predictions share a line
    (the model often ignores a parameter such as admission), labelled with every group."""
    group_cols = [c for c in predicted.columns if c in params and c != TIER_PARAM]
    groups = predicted.groupby(group_cols, dropna=False) if group_cols else [((), predicted)]
    lines: dict[tuple, list[str]] = {}
    for key, group in groups:
        key = key if isinstance(key, tuple) else (key,)
        group = group[[float(t) in pos for t in group[TIER_PARAM]]].sort_values(TIER_PARAM)
        if group.empty:
            continue
        xy = tuple(
            (pos[float(t)], float(v)) for t, v in zip(group[TIER_PARAM], group[metric], strict=True)
        )
        lines.setdefault(xy, []).append(series_label(dict(zip(group_cols, key, strict=True))))
    out = []
    for xy, labels in lines.items():
        label = "all groups" if len(lines) == 1 and len(labels) > 1 else " / ".join(labels)
        out.append((label, [x for x, _ in xy], [y for _, y in xy]))
    return out


def restores_writes_vs_tier(
    agg: pd.DataFrame, params: Sequence[str], ctx: FigureContext
) -> Figure | None:
    """Figure 3: host restores (solid) and writes (dashed) per tier, and the write:read ratio."""
    metrics = set(agg["metric"]) if not agg.empty else set()
    if TIER_PARAM not in agg.columns or not {"host_restore_tokens", "host_write_tokens"} & metrics:
        return None
    fig, (left, right) = new_figure(ctx, "Host tier traffic vs host tier", ncols=2)
    for i, s in enumerate(split_series(agg, params, TIER_PARAM)):
        color = f"C{i % 10}"
        x = s.mean[TIER_PARAM]
        if "host_restore_tokens" in s.mean:
            left.errorbar(
                x,
                s.mean["host_restore_tokens"],
                yerr=yerr(s, "host_restore_tokens"),
                color=color,
                marker="o",
                capsize=3,
                label=f"restores: {s.label}",
            )
        if "host_write_tokens" in s.mean:
            left.errorbar(
                x,
                s.mean["host_write_tokens"],
                yerr=yerr(s, "host_write_tokens"),
                color=color,
                marker="s",
                linestyle="--",
                capsize=3,
                label=f"writes: {s.label}",
            )
        if "write_read_ratio" in s.mean:
            right.errorbar(
                x,
                s.mean["write_read_ratio"],
                yerr=yerr(s, "write_read_ratio"),
                color=color,
                marker="o",
                capsize=3,
                label=s.label,
            )
    left.set_xlabel(TIER_LABEL)
    left.set_ylabel(f"tokens, {spread_label(agg, ['host_restore_tokens', 'host_write_tokens'])}")
    left.grid(alpha=0.3)
    legend_outside(left)
    right.axhline(1.0, color="0.5", linewidth=0.8, label="writes = restores")
    right.set_xlabel(TIER_LABEL)
    right.set_ylabel("write:read (host writes / host restores)")
    right.grid(alpha=0.3)
    legend_outside(right)
    return fig
