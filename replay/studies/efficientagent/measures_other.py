"""Our side of the claims measured beside paper-h20: eight agents (paper-pool8), prefix caching
alone (paper-prefix), the hardware comparison (the presets and paper-hardware) and context
folding (paper-folding).

Same contract as `measures`: `Measured`, `Missing(what)`, or None for no row.
"""

from __future__ import annotations

from typing import Any

from replay.analysis.compare import Comparison, welch_compare
from replay.model.closed_form import working_set_bytes
from replay.model.presets import get_hardware, get_model
from replay.studies.efficientagent.measures import (
    Est,
    Inputs,
    Measured,
    Missing,
    Outcome,
    est_cmp,
    est_of,
)
from replay.studies.efficientagent.runs import PaperRun, cmp_text, pct, stat_text

# -- eight agents ------------------------------------------------------------------------------


def pool8_working_set(i: Inputs) -> Outcome:
    pool8 = i.run("paper-pool8")
    if pool8 is None:
        return Missing("paper-pool8")
    ws = pool8.working_set_gib()
    return Measured("-" if ws is None else f"{ws:.2f} GiB", (Est(ws),))


def pool8_3gib(i: Inputs) -> Outcome:
    """The finding holds when a 3 GiB tier removes at least half of the recompute."""
    pool8 = i.run("paper-pool8")
    if pool8 is None:
        return Missing("paper-pool8")
    c = welch_compare(
        pool8.values("computed_prefill_tokens", host_tier_gib=0),
        pool8.values("computed_prefill_tokens", host_tier_gib=3),
    )
    if c.verdict == "no data":
        return Missing("paper-pool8")
    holds = 1.0 if c.rel_diff <= -0.5 else 0.0
    return Measured(f"computed prefill at 3 GiB vs none: {cmp_text(c)}", (Est(holds),))


def pool8_makespan(i: Inputs) -> Outcome:
    pool8, h20 = i.run("paper-pool8"), i.run("paper-h20")
    if pool8 is None:
        return Missing("paper-pool8")
    if h20 is None:
        return Missing("paper-h20")
    c = welch_compare(  # paper-h20's 0 GiB runs of one admission (the others are the same runs)
        h20.values("makespan_s", host_tier_gib=0, admission="all"),
        pool8.values("makespan_s", host_tier_gib=0),
    )
    return Measured(cmp_text(c), (est_cmp(c),))


# -- prefix caching alone ----------------------------------------------------------------------


def prefix_caching_speedup(i: Inputs) -> Outcome:
    """How many times faster device prefix caching alone makes a run: makespan with caching off
    over makespan with it on, no host tier (paper-prefix)."""
    run = i.run("paper-prefix")
    if run is None:
        return Missing("paper-prefix")
    c = welch_compare(
        run.values("makespan_s", enable_prefix_caching=True),
        run.values("makespan_s", enable_prefix_caching=False),
    )
    if c.verdict == "no data":
        return Missing("paper-prefix")
    return Measured(f"{1 + c.rel_diff:.2f}x ({cmp_text(c)})", (est_cmp(c, ratio=True),))


# -- hardware ----------------------------------------------------------------------------------

_CARDS = ("rtx-3090", "h20", "h800")
_LOW = ("rtx-3090", "h20")


def compute_per_byte(card: str) -> Any:
    """The hardware preset's compute per host-link byte (FLOP per byte)."""

    def measure(_: Inputs) -> Outcome:
        cpb = get_hardware(card).compute_per_host_byte
        return Measured(f"{cpb:,.0f}", (Est(cpb),))

    return measure


def _bytes_only(hw: PaperRun) -> dict[str, float]:
    """Selects the runs whose copies cost their bytes only, in results written when the
    experiment still swept a fixed per-chunk copy cost (`transfer_overhead_s`); results without
    that axis are all bytes-only."""
    return {"transfer_overhead_s": 0.0} if "transfer_overhead_s" in hw.ok.columns else {}


def _tier_changes(hw: PaperRun, name: str) -> dict[float, Comparison]:
    """Makespan at every host tier against no tier, on card `name`."""
    where = _bytes_only(hw)
    base = hw.values("makespan_s", hardware=name, host_tier_gib=0, **where)
    tiers = sorted({float(t) for t in hw.ok["host_tier_gib"]} - {0.0}) if len(hw.ok) else []
    out = {}
    for tier in tiers:
        c = welch_compare(base, hw.values("makespan_s", hardware=name, host_tier_gib=tier, **where))
        if c.verdict != "no data":
            out[tier] = c
    return out


def _offload_gain(hw: PaperRun, name: str) -> Comparison | None:
    """Best tier above the working set (20 or 40 GiB) against no tier, on card `name`."""
    above = [c for t, c in _tier_changes(hw, name).items() if t >= 20]
    return min(above, key=lambda c: c.rel_diff) if above else None


def _gains(hw: PaperRun) -> dict[str, Comparison]:
    return {n: c for n in _CARDS if (c := _offload_gain(hw, n)) is not None}


def offload_ratio(card: str) -> Any:
    """Makespan with the best tier above the working set over no tier, on `card`."""

    def measure(i: Inputs) -> Outcome:
        hw = i.run("paper-hardware")
        if hw is None:
            return Missing("paper-hardware")
        c = _gains(hw).get(card)
        if c is None:
            return Missing(f"paper-hardware (with {card})")
        return Measured(f"{1 + c.rel_diff:.2f} ({cmp_text(c)})", (est_cmp(c, ratio=True),))

    return measure


def _by_tier(changes: dict[float, Comparison]) -> str:
    return "; ".join(f"{t:g} GiB {pct(c.rel_diff)}" for t, c in changes.items())


def offload_h800(i: Inputs) -> Outcome:
    """The H800's makespan change at every tier against no tier; the study says every run was
    slower, so the estimate judged is the smallest change (a gain at any tier makes it negative)."""
    hw = i.run("paper-hardware")
    if hw is None:
        return Missing("paper-hardware")
    changes = _tier_changes(hw, "h800")
    if not changes:
        return Missing("paper-hardware (with h800)")
    worst = min(changes.values(), key=lambda c: c.rel_diff)
    return Measured(f"h800: {_by_tier(changes)}", (est_cmp(worst),))


def offload_split(i: Inputs) -> Outcome:
    """The finding is 1 when offload loses on the H800 at every tier swept while it pays on the
    H20 and the RTX 3090 at their best tier; each card's change per tier is shown."""
    hw = i.run("paper-hardware")
    if hw is None:
        return Missing("paper-hardware")
    changes = {n: ch for n in _CARDS if (ch := _tier_changes(hw, n))}
    if len(changes) < len(_CARDS):
        return Missing("paper-hardware (all three cards)")
    best = {n: min(c.rel_diff for c in ch.values()) for n, ch in changes.items()}
    holds = best["h800"] > 0 and all(best[n] < 0 for n in _LOW)
    text = " | ".join(f"{n}: {_by_tier(ch)}" for n, ch in changes.items())
    return Measured(text, (Est(1.0 if holds else 0.0),))


# -- context folding ---------------------------------------------------------------------------


def folding_hit(i: Inputs) -> Outcome:
    """Prefix hit rate at the largest tier with folding (after the hit rate without, from
    paper-hardware's RTX 3090 runs, when they ran)."""
    fold, hw = i.run("paper-folding"), i.run("paper-hardware")
    if fold is None:
        return Missing("paper-folding")
    tier = max(float(t) for t in fold.ok["host_tier_gib"]) / fold.tier_scale if len(fold.ok) else 40
    hit = fold.values("cached_tokens", host_tier_gib=tier) / fold.values(
        "prompt_tokens", host_tier_gib=tier
    )
    text = stat_text(hit, lambda x: pct(x, signed=False))
    if hw is not None:
        sel = {"hardware": "rtx-3090", "host_tier_gib": tier, **_bytes_only(hw)}
        before = hw.values("cached_tokens", **sel) / hw.values("prompt_tokens", **sel)
        if len(before):
            text = f"{pct(float(before.mean()), False)} -> {text}"
    return Measured(f"{text} at {tier:g} GiB", (est_of(hit),))


# -- arithmetic on the presets ------------------------------------------------------------------

_MODEL, _TP = "qwen3-coder-30b-a3b", 8


def working_set_64x64k(_: Inputs) -> Outcome:
    """(A-1)·N·β for 64 agents at 64K tokens, per TP8 rank of the study's model."""
    bpt = get_model(_MODEL).bytes_per_token(_TP)
    gib = working_set_bytes(64, 64 * 1024, bpt) / (1 << 30)
    return Measured(f"{gib:.1f} GiB", (Est(gib),))


def load_vs_recompute(card: str, efficiency: float = 0.6) -> Any:
    """Recomputing a token (weight FLOPs per rank at `efficiency` of peak, the simulator's
    default) over loading its KV bytes per rank at the full host link: how much cheaper a load is."""

    def measure(_: Inputs) -> Outcome:
        m, hw = get_model(_MODEL), get_hardware(card)
        recompute_s = m.linear_flops_per_token() / _TP / (hw.peak_flops * efficiency)
        load_s = m.bytes_per_token(_TP) / hw.host_link_bytes_per_s
        x = recompute_s / load_s
        return Measured(f"{x:.1f}x (weights only, {efficiency:.0%} of peak)", (Est(x),))

    return measure
