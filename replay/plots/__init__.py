"""Figures of a results directory (matplotlib, Agg, PNG and SVG); one module per figure family."""

from replay.plots.common import FigureContext, save_figure
from replay.plots.engines import ENGINE_METRICS, engine_comparison
from replay.plots.latency import ttft_cdf, ttft_s
from replay.plots.pressure import hits_vs_pressure
from replay.plots.tiers import makespan_vs_tier, prefill_vs_tier, restores_writes_vs_tier
from replay.plots.timeline import slot_timeline

__all__ = [
    "ENGINE_METRICS",
    "FigureContext",
    "engine_comparison",
    "hits_vs_pressure",
    "makespan_vs_tier",
    "prefill_vs_tier",
    "restores_writes_vs_tier",
    "save_figure",
    "slot_timeline",
    "ttft_cdf",
    "ttft_s",
]
