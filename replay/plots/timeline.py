"""Figure 5: where the time goes in one run. Each agent slot is a lane; each call a bar split into
waiting (ready -> sent), prefill/queue (sent -> first token) and decode (first token -> end);
blank space between bars is the agent's gap (tool time)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from replay.plots.common import FigureContext, new_figure

__all__ = ["PHASES", "call_phases", "phase_shares", "slot_timeline"]

# phase name -> (start column, end column, colour)
PHASES = {
    "waiting": ("t_ready", "t_send", "0.75"),
    "prefill/queue": ("t_send", "t_first_token", "C1"),
    "decode": ("t_first_token", "t_end", "C0"),
}
RASTERIZE_BARS = 1500
_NEEDED = ("slot", "t_ready", "t_send", "t_first_token", "t_end")


def call_phases(calls: pd.DataFrame) -> dict[str, dict[int, list[tuple[float, float]]]]:
    """Per phase, per slot: (start_s, duration_s) bars. A call without a first token (an error)
    shows its whole send -> end span as prefill/queue."""
    df = calls.dropna(subset=["slot", "t_send", "t_end"]).copy()
    df["t_ready"] = df["t_ready"].fillna(df["t_send"])
    df["t_first_token"] = df["t_first_token"].fillna(df["t_end"])
    out: dict[str, dict[int, list[tuple[float, float]]]] = {p: {} for p in PHASES}
    for phase, (start, end, _) in PHASES.items():
        dur = (df[end] - df[start]).to_numpy(dtype=float)
        for slot, t0, d in zip(
            df["slot"].astype(int), df[start].to_numpy(dtype=float), dur, strict=True
        ):
            if d > 0:
                out[phase].setdefault(int(slot), []).append((float(t0), float(d)))
    return out


def phase_shares(
    phases: dict[str, dict[int, list[tuple[float, float]]]], n_slots: int
) -> dict[str, float]:
    """Each phase's share of total slot time (slots x span from 0 to the last call end); the rest,
    `gap`, is time the slot spent outside the server."""
    ends = [t0 + d for per_slot in phases.values() for bars in per_slot.values() for t0, d in bars]
    total = n_slots * max(ends, default=0.0)
    if total <= 0:
        return {}
    out = {
        p: sum(d for bars in per_slot.values() for _, d in bars) / total
        for p, per_slot in phases.items()
    }
    out["gap"] = max(0.0, 1.0 - sum(out.values()))
    return out


def slot_timeline(calls: pd.DataFrame, ctx: FigureContext, run_label: str) -> Figure | None:
    """Lanes per slot (y), seconds since run start (x); one broken_barh per slot and phase."""
    if calls.empty or any(c not in calls.columns for c in _NEEDED):
        return None
    phases = call_phases(calls)
    slots = sorted({s for per_slot in phases.values() for s in per_slot})
    if not slots:
        return None
    height_in = min(2.5 + 0.22 * len(slots), 14.0)
    fig, (ax,) = new_figure(ctx, f"Per-slot timeline: {run_label}", height_in=height_in)
    lane = {s: i for i, s in enumerate(slots)}
    n_bars = sum(len(bars) for per_slot in phases.values() for bars in per_slot.values())
    for phase, (_, _, color) in PHASES.items():
        for slot, bars in phases[phase].items():
            coll = ax.broken_barh(bars, (lane[slot] - 0.4, 0.8), facecolors=color, linewidth=0)
            coll.set_gid(f"{phase}|{slot}")
            # Thousands of bars make a multi-megabyte SVG; past that, the bars go in as pixels.
            coll.set_rasterized(n_bars > RASTERIZE_BARS)
    shares = phase_shares(phases, len(slots))
    ax.set_title(
        "share of slot time: " + ", ".join(f"{p} {v * 100:.1f}%" for p, v in shares.items()),
        fontsize=8,
    )
    step = max(1, int(np.ceil(len(slots) / 40)))
    ax.set_yticks([lane[s] for s in slots][::step], [str(s) for s in slots][::step])
    ax.set_ylim(-0.6, len(slots) - 0.4)
    ax.invert_yaxis()
    ax.set_xlabel("time since run start (s)")
    ax.set_ylabel("agent slot")
    ax.grid(axis="x", alpha=0.3)
    # Right of the lanes, outside the axes: a legend inside would hide calls.
    ax.legend(
        handles=[Patch(color=c, label=p) for p, (_, _, c) in PHASES.items()]
        + [Patch(facecolor="white", edgecolor="0.6", label="gap (agent/tool time, or idle)")],
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize=7,
    )
    return fig
