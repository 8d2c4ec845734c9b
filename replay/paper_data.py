"""The EfficientAgent study's published numbers, as data with their sources.

Each `Published` entry is one claim of the study that `replay.paper` sets beside our runs. Values
are the study's as printed (minutes, GiB per tensor-parallel rank, tokens, fractions); `source`
says where in the study they come from. Nothing here is measured by us.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Published", "PUBLISHED", "STUDY", "published"]

STUDY = (
    "EfficientAgent study: H20, Qwen3-Coder-30B-A3B-Instruct BF16, TP8, 16 SWE-agent tasks at "
    "once, vLLM + LMCache with a host KV tier per rank"
)


@dataclass(frozen=True)
class Published:
    """One published claim: `value` (a number, or a (low, high) range) in `unit`."""

    key: str
    section: str
    claim: str
    value: float | tuple[float, float] | None
    unit: str
    source: str

    @property
    def text(self) -> str:
        """The published value as the study printed it."""
        v = self.value
        if v is None:
            return "holds"
        if isinstance(v, tuple):
            return f"{_num(v[0], self.unit)}-{_num(v[1], self.unit)}"
        return _num(v, self.unit)


def _num(x: float, unit: str) -> str:
    if unit == "fraction":
        return f"{x * 100:.1f}%"
    if unit == "tokens" and abs(x) >= 1e6:
        return f"{x / 1e6:.2f}M"
    if unit == "tokens" and abs(x) >= 1e3:
        return f"{x / 1e3:.0f}K"
    if unit == "ratio":
        return f"{x:.2f}"
    if unit == "x":
        return f"{x:g}x"
    if unit in ("GiB", "min"):
        return f"{x:g} {unit}"
    return f"{x:,.0f}" if x >= 100 else f"{x:g}"


_H20 = "study, H20 sweep (16 agents, host tier per rank)"
_MODEL = "study, working-set model predictions before the runs"
_ADM = "study, admission experiments (fixed write filter, capacity-conditioned admission)"

PUBLISHED: tuple[Published, ...] = (
    # The workload
    Published("calls", "workload", "calls in the trace", 4427, "count", "study, trace"),
    Published("prompt_tokens", "workload", "prompt tokens", 147e6, "tokens", "study, trace"),
    Published("max_context", "workload", "largest context", 238e3, "tokens", "study, trace"),
    Published(
        "reuse",
        "workload",
        "prompt reused from the previous call",
        (0.97, 0.98),
        "fraction",
        "study, trace",
    ),
    Published(
        "reappears",
        "workload",
        "newly computed KV that reappears in the next call",
        0.973,
        "fraction",
        "study, trace",
    ),
    # Working set and pressure
    Published("working_set", "pressure", "reuse working set per rank", 11.4, "GiB", _H20),
    Published("pressure_5", "pressure", "pressure at 5 GiB", 2.3, "ratio", _H20),
    Published("pressure_10", "pressure", "pressure at 10 GiB", 1.1, "ratio", _H20),
    Published("pressure_20", "pressure", "pressure at 20 GiB", 0.57, "ratio", _H20),
    # Under pressure: 5 GiB
    Published(
        "makespan_5",
        "5 GiB",
        "makespan at 5 GiB / no offload (209 vs 212 min)",
        209 / 212,
        "ratio",
        _H20,
    ),
    Published("write_read_5", "5 GiB", "tokens written per token restored", 6.5, "ratio", _H20),
    Published(
        "evicted_unread_5",
        "5 GiB",
        "chunks written then evicted before the next call",
        0.792,
        "fraction",
        _H20,
    ),
    # Above the working set
    Published(
        "makespan_20",
        "20 GiB",
        "makespan at 20 GiB / no offload (128 vs 212 min)",
        128 / 212,
        "ratio",
        _H20,
    ),
    Published("prefill_20", "20 GiB", "computed prefill change at 20 GiB", -0.93, "fraction", _H20),
    Published(
        "flat_past_20",
        "20 GiB",
        "flat past 20 GiB (computed prefill at 40/80 GiB vs 20 GiB)",
        None,
        "",
        _H20,
    ),
    Published(
        "repeat_cv_40",
        "20 GiB",
        "run-to-run CV at 40 GiB (124.0, 115.9, 123.7 min)",
        0.037,
        "fraction",
        _H20,
    ),
    # Pre-registered predictions
    Published(
        "pred_prefill_20",
        "predictions",
        "computed prefill at 20 GiB: predicted (measured 5.28M)",
        (5.19e6, 5.78e6),
        "tokens",
        _MODEL,
    ),
    Published(
        "pred_prefill_80",
        "predictions",
        "computed prefill at 80 GiB: predicted (measured 5.29M)",
        (5.19e6, 5.31e6),
        "tokens",
        _MODEL,
    ),
    Published(
        "pred_restores_10",
        "predictions",
        "restores at 10 GiB: predicted (measured 65.2M)",
        (55.3e6, 58.9e6),
        "tokens",
        _MODEL,
    ),
    # Admission
    Published(
        "fixed_prefill_5",
        "admission",
        "fixed filter: computed prefill at 5 GiB",
        -0.36,
        "fraction",
        _ADM,
    ),
    Published(
        "fixed_prefill_40",
        "admission",
        "fixed filter: computed prefill at 40 GiB (x plain)",
        4.0,
        "x",
        _ADM,
    ),
    Published(
        "fixed_makespan_40",
        "admission",
        "fixed filter: makespan at 40 GiB (124 -> 162 min)",
        162 / 124 - 1,
        "fraction",
        _ADM,
    ),
    Published(
        "cond_prefill_5",
        "admission",
        "conditioned: computed prefill at 5 GiB",
        -0.35,
        "fraction",
        _ADM,
    ),
    Published(
        "cond_prefill_40",
        "admission",
        "conditioned: computed prefill at 40 GiB vs plain",
        0.0,
        "fraction",
        _ADM,
    ),
    Published(
        "cond_makespan_5",
        "admission",
        "conditioned: makespan gain at 5 GiB",
        -0.10,
        "fraction",
        _ADM,
    ),
    Published(
        "cond_makespan_10",
        "admission",
        "conditioned: makespan at 10 GiB (161 -> 157 min, within noise)",
        157 / 161 - 1,
        "fraction",
        _ADM,
    ),
    Published(
        "declined_5",
        "admission",
        "writes declined at 5 GiB (any kappa 2-16)",
        0.90,
        "fraction",
        _ADM,
    ),
    # Pool 8
    Published(
        "pool8_working_set",
        "pool 8",
        "working set with 8 agents",
        5.3,
        "GiB",
        "study, 8-agent runs",
    ),
    Published(
        "pool8_3gib",
        "pool 8",
        "a 3 GiB tier already recovers prefixes",
        None,
        "",
        "study, 8-agent runs",
    ),
    Published(
        "pool8_makespan",
        "pool 8",
        "halving the pool: recompute makespan change",
        -0.248,
        "fraction",
        "study, 8-agent runs",
    ),
    # Hardware
    Published(
        "cpb_rtx-3090",
        "hardware",
        "compute per host-link byte, RTX 3090",
        2.2e3,
        "count",
        "study, hardware comparison",
    ),
    Published(
        "cpb_h20",
        "hardware",
        "compute per host-link byte, H20",
        2.3e3,
        "count",
        "study, hardware comparison",
    ),
    Published(
        "cpb_h800",
        "hardware",
        "compute per host-link byte, H800",
        15.5e3,
        "count",
        "study, hardware comparison",
    ),
    Published(
        "offload_gain_low",
        "hardware",
        "offload makespan gain, RTX 3090 and H20",
        (0.08, 0.40),
        "fraction",
        "study, hardware comparison",
    ),
    Published(
        "offload_h800",
        "hardware",
        "offload on H800: slower in every run by",
        (0.08, 0.87),
        "fraction",
        "study, hardware comparison",
    ),
    Published(
        "offload_split",
        "hardware",
        "same workload and host-link costs: offload loses on H800, pays on H20 and RTX 3090",
        None,
        "fraction",
        "study, hardware comparison",
    ),
    # Folding
    Published(
        "folding_hit",
        "folding",
        "prefix hit rate with context folding (96.5% without)",
        (0.51, 0.61),
        "fraction",
        "study, context folding on an RTX 3090",
    ),
)


def published(key: str) -> Published:
    """The published claim called `key` (KeyError lists nothing: keys are this module's)."""
    for p in PUBLISHED:
        if p.key == key:
            return p
    raise KeyError(key)
