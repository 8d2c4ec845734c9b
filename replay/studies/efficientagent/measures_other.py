"""Our side of the claims measured beside paper-h20: eight agents (paper-pool8), the hardware
comparison (the presets and paper-hardware) and context folding (paper-folding).

Same contract as `measures`: `Measured`, `Missing(what)`, or None for no row.
"""

from __future__ import annotations

from typing import Any

from replay.analysis.compare import Comparison, welch_compare
from replay.model.presets import get_hardware
from replay.studies.efficientagent.measures import Inputs, Measured, Missing, Outcome, mean_or_none
from replay.studies.efficientagent.runs import PaperRun, cmp_text, pct, stat_text

# -- eight agents ------------------------------------------------------------------------------


def pool8_working_set(i: Inputs) -> Outcome:
    pool8 = i.run("paper-pool8")
    if pool8 is None:
        return Missing("paper-pool8")
    ws = pool8.working_set_gib()
    return Measured("-" if ws is None else f"{ws:.2f} GiB", (ws,))


def pool8_3gib(i: Inputs) -> Outcome:
    pool8 = i.run("paper-pool8")
    if pool8 is None:
        return None
    c = welch_compare(
        pool8.values("computed_prefill_tokens", host_tier_gib=0),
        pool8.values("computed_prefill_tokens", host_tier_gib=3),
    )
    if c.verdict == "no data":
        return Missing("paper-pool8")
    return Measured(f"computed prefill at 3 GiB vs none: {cmp_text(c)}", (c.rel_diff,))


def pool8_makespan(i: Inputs) -> Outcome:
    pool8, h20 = i.run("paper-pool8"), i.run("paper-h20")
    if pool8 is None:
        return Missing("paper-pool8")
    if h20 is None:
        return None
    c = welch_compare(
        h20.values("makespan_s", host_tier_gib=0), pool8.values("makespan_s", host_tier_gib=0)
    )
    return Measured(cmp_text(c), (c.rel_diff,))


# -- hardware ----------------------------------------------------------------------------------

_CARDS = ("rtx-3090", "h20", "h800")
_LOW = ("rtx-3090", "h20")


def compute_per_byte(card: str) -> Any:
    """The hardware preset's compute per host-link byte (FLOP per byte)."""

    def measure(_: Inputs) -> Outcome:
        cpb = get_hardware(card).compute_per_host_byte
        return Measured(f"{cpb:,.0f}", (cpb,))

    return measure


def _bytes_only(hw: PaperRun) -> dict[str, float]:
    """Selects the runs whose copies cost their bytes only (no per-chunk overhead), where the
    experiment sweeps that overhead; older results without the axis are all bytes-only."""
    return {"transfer_overhead_s": 0.0} if "transfer_overhead_s" in hw.ok.columns else {}


def _offload_gain(hw: PaperRun, name: str, **where: float) -> Comparison | None:
    """Best tier above the working set against no tier, on card `name`."""
    base = hw.values("makespan_s", hardware=name, host_tier_gib=0, **where)
    best = None
    for tier in (20, 40):
        c = welch_compare(base, hw.values("makespan_s", hardware=name, host_tier_gib=tier, **where))
        if c.verdict != "no data" and (best is None or c.rel_diff < best.rel_diff):
            best = c
    return best


def _gains(hw: PaperRun) -> dict[str, Comparison]:
    return {n: c for n in _CARDS if (c := _offload_gain(hw, n, **_bytes_only(hw))) is not None}


def offload_gain_low(i: Inputs) -> Outcome:
    """The offload gain (makespan saved, a positive fraction) on the two low-ratio cards."""
    hw = i.run("paper-hardware")
    if hw is None:
        return Missing("paper-hardware")
    gains = _gains(hw)
    low = [n for n in _LOW if n in gains]
    if not low:
        return None
    text = "; ".join(f"{n}: {cmp_text(gains[n])}" for n in low)
    return Measured(text, tuple(-gains[n].rel_diff for n in low))


def offload_h800(i: Inputs) -> Outcome:
    hw = i.run("paper-hardware")
    c = _gains(hw).get("h800") if hw is not None else None
    return None if c is None else Measured(f"h800: {cmp_text(c)}", (c.rel_diff,))


def offload_split(i: Inputs) -> Outcome:
    """Per-chunk host-link overhead at which offload stops paying, card by card; the finding is
    1 when some swept overhead makes it lose on the H800 only."""
    hw = i.run("paper-hardware")
    if hw is None or "transfer_overhead_s" not in hw.ok.columns:
        return None
    overheads = sorted({float(x) for x in hw.ok["transfer_overhead_s"]})
    by: dict[float, dict[str, Comparison]] = {}
    for o in overheads:
        by[o] = {n: c for n in _CARDS if (c := _offload_gain(hw, n, transfer_overhead_s=o))}
    split = [
        o
        for o in overheads
        if len(by[o]) == 3
        and by[o]["h800"].rel_diff > 0
        and all(by[o][n].rel_diff < 0 for n in _LOW)
    ]

    def loses_from(name: str) -> str:
        lost = [o for o in overheads if name in by[o] and by[o][name].rel_diff > 0]
        return f"{lost[0] * 1e3:g} ms" if lost else f"> {overheads[-1] * 1e3:g} ms"

    where = f"offload loses from: {'; '.join(f'{n} {loses_from(n)}' for n in _CARDS)}"
    if split:
        o = split[0]
        parts = ", ".join(f"{n} {pct(by[o][n].rel_diff)}" for n in _CARDS)
        return Measured(f"at {o * 1e3:g} ms per chunk: {parts} ({where})", (1.0,))
    return Measured(f"no swept overhead splits the cards ({where})", (0.0,))


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
    return Measured(f"{text} at {tier:g} GiB", (mean_or_none(hit),))
