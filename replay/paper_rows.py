"""Every published claim of the EfficientAgent study beside our number, section by section.

Each builder takes the loaded paper-* runs (`replay.paper_runs.PaperRun`, None when not run) and
returns `Row`s with a verdict and a note saying why. Tolerances are stated in the notes.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from replay.analysis.aggregate import describe
from replay.analysis.compare import REAL, Comparison, welch_compare
from replay.analysis.predictions import agrees
from replay.analysis.words import fmt_interval, fmt_num
from replay.model.presets import get_hardware
from replay.paper_data import PUBLISHED
from replay.paper_runs import (
    DIRECTION,
    NO,
    YES,
    PaperRun,
    Row,
    _cmp_text,
    _missing,
    _pct,
    _ratio_text,
    _row,
    _stat_text,
    _within,
)

__all__ = ["paper_rows"]


def _workload_rows(facts: dict[str, float | None] | None) -> list[Row]:
    if not facts:
        keys = ("calls", "prompt_tokens", "max_context", "reuse", "reappears")
        return [_missing(k, "paper-h20") for k in keys]
    f = facts
    rows = [
        _row(
            "calls",
            f"{f['calls']:,}",
            YES if _within(f["calls"], 4427, 0.05) else NO,
            "within 5%",
        ),
        _row(
            "prompt_tokens",
            fmt_num(f["prompt_tokens"]),
            YES if _within(f["prompt_tokens"], 147e6, 0.10) else NO,
            "within 10%",
        ),
    ]
    mx = f["max_context"]
    rows.append(
        _row(
            "max_context",
            fmt_num(mx),
            YES if mx is not None and 0.8 * 238e3 <= mx <= 238e3 else DIRECTION,
            "the preset caps contexts at 238K; with 100 tasks the longest drawn task stops short "
            "of the cap",
        )
    )
    reuse = f["reuse"]
    rows.append(
        _row(
            "reuse",
            _pct(reuse, signed=False),
            YES if reuse is not None and 0.965 <= reuse <= 0.985 else NO,
            "longest common prefix with the previous call's context",
        )
    )
    re = f["reappears"]
    rows.append(
        _row(
            "reappears",
            _pct(re, signed=False),
            YES if _within(re, 0.973, 0.02) else DIRECTION,
            "synthetic tasks never drop history, so only a task's last call loses its new KV",
        )
    )
    return rows


def _pressure_rows(h20: PaperRun | None) -> list[Row]:
    if h20 is None or h20.working_set_gib() is None:
        return [_missing("working_set", "paper-h20")]
    ws = h20.working_set_gib()
    assert ws is not None
    rows = [
        _row("working_set", f"{ws:.2f} GiB", YES if _within(ws, 11.4, 0.10) else NO, "(A-1)·N̄·β")
    ]
    for tier, key, target in ((5, "pressure_5", 2.3), (10, "pressure_10", 1.1)):
        rows.append(_row(key, f"{ws / tier:.2f}", YES if _within(ws / tier, target, 0.1) else NO))
    rows.append(_row("pressure_20", f"{ws / 20:.2f}", YES if _within(ws / 20, 0.57, 0.1) else NO))
    return rows


def _h20_rows(h20: PaperRun | None) -> list[Row]:
    keys = ("makespan_5", "write_read_5", "evicted_unread_5", "makespan_20", "prefill_20")
    if h20 is None:
        return [_missing(k, "paper-h20") for k in keys]
    a = {"admission": "all"}
    rows = []
    base_ms = h20.values("makespan_s", host_tier_gib=0)
    text, r5 = _ratio_text(h20.values("makespan_s", host_tier_gib=5, **a), base_ms)
    ok5 = r5 is not None and r5 >= 0.93
    rows.append(
        _row("makespan_5", text, YES if ok5 else NO, "no faster than no offload: ratio >= 0.93")
    )
    wr = h20.values("write_read_ratio", host_tier_gib=5, **a)
    wr_mean = float(wr.mean()) if len(wr) else None
    rows.append(
        _row(
            "write_read_5",
            _stat_text(wr, lambda x: f"{x:.1f}"),
            (YES if _within(wr_mean, 6.5, 0.3) else DIRECTION)
            if wr_mean is not None and wr_mean >= 3
            else NO,
            "several-to-one is the claim; the exact ratio depends on how many device misses "
            "the host tier can serve",
        )
    )
    eu = h20.values("evicted_unread_fraction", host_tier_gib=5, **a)
    eu_mean = float(eu.mean()) if len(eu) else None
    rows.append(
        _row(
            "evicted_unread_5",
            _stat_text(eu, lambda x: _pct(x, signed=False)),
            (YES if _within(eu_mean, 0.792, 0.1) else DIRECTION)
            if eu_mean is not None and eu_mean >= 0.5
            else NO,
            "ours: evicted before ever being restored (the study: before the next call)",
        )
    )
    text, r20 = _ratio_text(h20.values("makespan_s", host_tier_gib=20, **a), base_ms)
    rows.append(
        _row(
            "makespan_20",
            text,
            YES if _within(r20, 128 / 212, 0.15) else (DIRECTION if r20 and r20 < 0.9 else NO),
            "within 15% of 0.60",
        )
    )
    c = welch_compare(
        h20.values("computed_prefill_tokens", host_tier_gib=0),
        h20.values("computed_prefill_tokens", host_tier_gib=20, **a),
    )
    rel = c.rel_diff if c.verdict != "no data" else None
    rows.append(
        _row(
            "prefill_20",
            _cmp_text(c),
            YES if _within(rel, -0.93, 0.05) else (DIRECTION if rel and rel < -0.67 else NO),
            "within 5 points of -93%",
        )
    )
    cp20 = h20.values("computed_prefill_tokens", host_tier_gib=20, **a)
    flat = []
    for tier in (40, 80):
        cc = welch_compare(cp20, h20.values("computed_prefill_tokens", host_tier_gib=tier, **a))
        if cc.verdict != "no data":
            flat.append((tier, cc))
    if flat:
        ok = all(abs(cc.rel_diff) <= 0.05 for _, cc in flat)
        rows.append(
            _row(
                "flat_past_20",
                "; ".join(f"{t} GiB: {_pct(cc.rel_diff)}" for t, cc in flat),
                YES if ok else NO,
                "within 5% of 20 GiB",
            )
        )
    cv = describe(h20.values("makespan_s", host_tier_gib=40, **a).tolist()).cv
    rows.append(
        _row(
            "repeat_cv_40",
            _pct(cv, signed=False) if math.isfinite(cv) else "-",
            NO if math.isfinite(cv) and cv < 1e-9 else DIRECTION,
            "the simulator's only noise is its seeded service-time jitter (jitter = 0.05), far "
            "below a real server's run-to-run spread; without jitter repeats are bit-identical"
            if cv >= 1e-9
            else "the simulator is deterministic: repeats are bit-identical, so it has no "
            "run-to-run noise to compare",
        )
    )
    return rows


def _prediction_rows(h20: PaperRun | None) -> list[Row]:
    """Pre-registered predictions against the measurement: the study published ranges, and so
    does the sweep (docs/model.md, Ranges); a prediction agrees when its range overlaps the
    measured 95% interval. Predictions written before ranges existed are judged by their point."""
    specs = (
        ("pred_prefill_20", 20, "computed_prefill_tokens"),
        ("pred_prefill_80", 80, "computed_prefill_tokens"),
        ("pred_restores_10", 10, "host_restore_tokens"),
    )
    if h20 is None:
        return [_missing(k, "paper-h20") for k, _, _ in specs]
    rows = []
    for key, tier, q in specs:
        pred = h20.prediction(q, tier, admission="all")
        meas = h20.values(q, host_tier_gib=tier, admission="all")
        if pred is None or not len(meas):
            rows.append(_missing(key, "paper-h20 (with predictions)"))
            continue
        low = h20.prediction(f"{q}_low", tier, admission="all")
        high = h20.prediction(f"{q}_high", tier, admission="all")
        s = describe(meas.tolist())
        err = (pred - s.mean) / s.mean if s.mean else math.nan
        if low is None or high is None:
            low = high = math.nan
            text = f"predicted {fmt_num(pred)}"
        else:
            width = (high - low) / pred if pred else math.nan
            text = (
                f"predicted {fmt_num(pred)} [{fmt_num(low)}-{fmt_num(high)}, width "
                f"{_pct(width, signed=False)}]"
            )
        ok = agrees(pred, low, high, s.mean, s.ci_low, s.ci_high, s.n)
        if isinstance(ok, float):  # one repeat and no range: judge the point to 10%
            ok = abs(err) <= 0.10
        far = tier != 10  # 10 GiB sits at the transition (pressure ~1.1)
        rows.append(
            _row(
                key,
                f"{text}, measured {fmt_interval(s.mean, s.half_width, s.n)}, error {_pct(err)}",
                YES if ok else NO,
                (
                    "far from the transition: the range overlaps the measured interval"
                    if ok
                    else "far from the transition, yet the range misses the measured interval"
                )
                if far
                else (
                    "at the transition (pressure ~1.1) the range still overlaps the measurement"
                    if ok
                    else "at the transition (pressure ~1.1) the model misses, as the study's did "
                    "(it under-predicted by 10-15%): calls wait seconds in the engine for device "
                    "space and look up the host tier when admitted; the model's one-line queue "
                    "catches only part of that wait (docs/model.md, Ranges)"
                ),
            )
        )
    return rows


def _admission_rows(h20: PaperRun | None, kappa: PaperRun | None = None) -> list[Row]:
    keys = (
        "fixed_prefill_5", "fixed_prefill_40", "fixed_makespan_40", "cond_prefill_5",
        "cond_prefill_40", "cond_makespan_5", "cond_makespan_10", "declined_5",
    )  # fmt: skip
    if h20 is None or "admission" not in h20.params:
        return [*(_missing(k, "paper-h20") for k in keys[:-1]), _declined_row(None, kappa)]

    def cmp(metric: str, tier: float, policy: str) -> Comparison:
        return welch_compare(
            h20.values(metric, host_tier_gib=tier, admission="all"),
            h20.values(metric, host_tier_gib=tier, admission=policy),
        )

    rows = []
    c = cmp("computed_prefill_tokens", 5, "fixed")
    rows.append(
        _row(
            "fixed_prefill_5",
            _cmp_text(c),
            YES if _within(c.rel_diff, -0.36, 0.5) else (DIRECTION if c.rel_diff < 0 else NO),
            "in the simulator fixed writes nothing (see 40 GiB), so it loses the few restores "
            "plain offload had; the study's filter let short calls' writes through",
        )
    )
    c = cmp("computed_prefill_tokens", 40, "fixed")
    ratio = 1 + c.rel_diff
    rows.append(
        _row(
            "fixed_prefill_40",
            f"{ratio:.2f}x ({_cmp_text(c)})",
            YES if ratio > 4 else (DIRECTION if ratio > 1.2 else NO),
            "the simulator's filter counts a call's chunks missing from the tier: a task's first "
            "call (~25 chunks) already exceeds kappa 8, so the task is never written and fixed "
            "equals no tier at every size",
        )
    )
    c = cmp("makespan_s", 40, "fixed")
    rows.append(
        _row(
            "fixed_makespan_40",
            _cmp_text(c),
            YES
            if _within(c.rel_diff, 0.31, 0.5)
            else (DIRECTION if c.rel_diff > 0 and c.verdict == REAL else NO),
        )
    )
    c = cmp("computed_prefill_tokens", 5, "conditioned")
    rows.append(
        _row(
            "cond_prefill_5",
            _cmp_text(c),
            YES if _within(c.rel_diff, -0.35, 0.5) else (DIRECTION if c.rel_diff < 0 else NO),
        )
    )
    c = cmp("computed_prefill_tokens", 40, "conditioned")
    rows.append(
        _row(
            "cond_prefill_40",
            _cmp_text(c),
            YES if abs(c.rel_diff) <= 0.02 else NO,
            "equal: within 2%",
        )
    )
    c = cmp("makespan_s", 5, "conditioned")
    rows.append(
        _row(
            "cond_makespan_5",
            _cmp_text(c),
            YES if _within(c.rel_diff, -0.10, 0.6) else (DIRECTION if c.rel_diff < 0 else NO),
        )
    )
    c = cmp("makespan_s", 10, "conditioned")
    rows.append(
        _row(
            "cond_makespan_10",
            _cmp_text(c),
            YES if abs(c.rel_diff) <= 0.05 else (DIRECTION if c.rel_diff < 0 else NO),
            "small either way: within 5%",
        )
    )
    rows.append(_declined_row(h20, kappa))
    return rows


def _declined_row(h20: PaperRun | None, kappa: PaperRun | None) -> Row:
    """Share of candidate writes the fixed filter declines at 5 GiB: per kappa from paper-kappa
    where it ran, else paper-h20's kappa 8."""

    def frac(run: PaperRun, **where: Any) -> np.ndarray:
        # paper-kappa fixes the tier and the policy in its engine table, not its matrix
        fixed = {"host_tier_gib": 5, "admission": "fixed"}
        where = {**{k: v for k, v in fixed.items() if k in run.ok.columns}, **where}
        written = run.values("chunks_written", **where)
        declined = run.values("declined_writes", **where)
        if not len(written) or len(declined) != len(written):
            return np.empty(0)
        return declined / (declined + written)

    if kappa is not None and "kappa" in kappa.ok.columns:
        fr = {int(k): frac(kappa, kappa=k) for k in sorted({int(k) for k in kappa.ok["kappa"]})}
        fr = {k: v for k, v in fr.items() if len(v)}
        if fr:
            text = "; ".join(
                f"kappa {k}: {_pct(float(v.mean()), signed=False)}" for k, v in fr.items()
            )
            ok = all(float(v.mean()) >= 0.9 for v in fr.values())
            return _row("declined_5", text, YES if ok else NO, "paper-kappa: fixed filter at 5 GiB")
    f8 = frac(h20) if h20 is not None else np.empty(0)
    if not len(f8):
        return _missing("declined_5", "paper-h20")
    return _row(
        "declined_5",
        _stat_text(f8, lambda x: _pct(x, signed=False)) + " (fixed, kappa 8)",
        YES if float(f8.mean()) >= 0.9 else NO,
        "only kappa = 8 ran (paper-kappa sweeps 2-16)",
    )


def _pool8_rows(pool8: PaperRun | None, h20: PaperRun | None) -> list[Row]:
    if pool8 is None:
        return [_missing(k, "paper-pool8") for k in ("pool8_working_set", "pool8_makespan")]
    rows = []
    ws = pool8.working_set_gib()
    rows.append(
        _row(
            "pool8_working_set",
            "-" if ws is None else f"{ws:.2f} GiB",
            YES if _within(ws, 5.3, 0.15) else NO,
            "within 15%",
        )
    )
    c = welch_compare(
        pool8.values("computed_prefill_tokens", host_tier_gib=0),
        pool8.values("computed_prefill_tokens", host_tier_gib=3),
    )
    if c.verdict == "no data":
        rows.append(_missing("pool8_3gib", "paper-pool8"))
    else:
        rows.append(
            _row(
                "pool8_3gib",
                f"computed prefill at 3 GiB vs none: {_cmp_text(c)}",
                YES if c.verdict != "no data" and c.rel_diff <= -0.5 else NO,
                "recovers: at least half of the recompute gone",
            )
        )
    if h20 is not None:
        c = welch_compare(
            h20.values("makespan_s", host_tier_gib=0), pool8.values("makespan_s", host_tier_gib=0)
        )
        rows.append(
            _row(
                "pool8_makespan",
                _cmp_text(c),
                YES if _within(c.rel_diff, -0.248, 0.4) else (DIRECTION if c.rel_diff < 0 else NO),
                "no-offload makespan, pool 8 vs pool 16 (same tasks)",
            )
        )
    return rows


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


_CARDS = ("rtx-3090", "h20", "h800")


def _hardware_rows(hw: PaperRun | None) -> list[Row]:
    rows = []
    for name, target in (("rtx-3090", 2.2e3), ("h20", 2.3e3), ("h800", 15.5e3)):
        cpb = get_hardware(name).compute_per_host_byte
        rows.append(
            _row(f"cpb_{name}", f"{cpb:,.0f}", YES if _within(cpb, target, 0.05) else NO, "preset")
        )
    if hw is None:
        return [*rows, _missing("offload_gain_low", "paper-hardware")]
    gains = {n: c for n in _CARDS if (c := _offload_gain(hw, n, **_bytes_only(hw))) is not None}
    low = [gains[n] for n in ("rtx-3090", "h20") if n in gains]
    if low:
        ok = all(-0.40 <= c.rel_diff <= -0.08 for c in low)
        rows.append(
            _row(
                "offload_gain_low",
                "; ".join(f"{n}: {_cmp_text(gains[n])}" for n in ("rtx-3090", "h20") if n in gains),
                YES if ok else (DIRECTION if all(c.rel_diff < 0 for c in low) else NO),
                "best tier above the working set vs no tier; copies cost their bytes only",
            )
        )
    if "h800" in gains:
        c = gains["h800"]
        rows.append(
            _row(
                "offload_h800",
                f"h800: {_cmp_text(c)}",
                YES if c.rel_diff > 0 else NO,
                "copies at LMCache's measured bandwidth, stalling the engine: the gain shrinks to "
                "a few percent (the no-offload H800 runs near the agents' tool-gap floor) but a "
                "restore's bytes still cost less than recomputing them at 15.5K FLOP/byte",
            )
        )
    rows.extend(_split_rows(hw))
    return rows


def _split_rows(hw: PaperRun) -> list[Row]:
    """Per-chunk host-link overhead at which offload stops paying, card by card."""
    if "transfer_overhead_s" not in hw.ok.columns:
        return []
    overheads = sorted({float(x) for x in hw.ok["transfer_overhead_s"]})
    by: dict[float, dict[str, Comparison]] = {}
    for o in overheads:
        by[o] = {n: c for n in _CARDS if (c := _offload_gain(hw, n, transfer_overhead_s=o))}
    split = [
        o
        for o in overheads
        if len(by[o]) == 3
        and by[o]["h800"].rel_diff > 0
        and all(by[o][n].rel_diff < 0 for n in ("rtx-3090", "h20"))
    ]

    def loses_from(name: str) -> str:
        lost = [o for o in overheads if name in by[o] and by[o][name].rel_diff > 0]
        return f"{lost[0] * 1e3:g} ms" if lost else f"> {overheads[-1] * 1e3:g} ms"

    where = f"offload loses from: {'; '.join(f'{n} {loses_from(n)}' for n in _CARDS)}"
    if split:
        o = split[0]
        parts = ", ".join(f"{n} {_pct(by[o][n].rel_diff)}" for n in _CARDS)
        ours = f"at {o * 1e3:g} ms per chunk: {parts} ({where})"
    else:
        ours = f"no swept overhead splits the cards ({where})"
    return [
        _row(
            "offload_split",
            ours,
            DIRECTION if split else NO,
            "holds only with a fixed cost per 256-token chunk copied, stalling the engine, that "
            "the study did not measure and LMCache's logs (bandwidth-bound copies) do not show; "
            "the loss starts where that cost outweighs the recompute the card saves, so much "
            "earlier on the H800",
        )
    ]


def _folding_rows(fold: PaperRun | None, hw: PaperRun | None) -> list[Row]:
    if fold is None:
        return [_missing("folding_hit", "paper-folding")]
    tier = max(float(t) for t in fold.ok["host_tier_gib"]) / fold.tier_scale if len(fold.ok) else 40
    hit = fold.values("cached_tokens", host_tier_gib=tier) / fold.values(
        "prompt_tokens", host_tier_gib=tier
    )
    text = _stat_text(hit, lambda x: _pct(x, signed=False))
    if hw is not None:
        sel = {"hardware": "rtx-3090", "host_tier_gib": tier, **_bytes_only(hw)}
        before = hw.values("cached_tokens", **sel) / hw.values("prompt_tokens", **sel)
        if len(before):
            text = f"{_pct(float(before.mean()), False)} -> {text}"
    m = float(hit.mean()) if len(hit) else None
    return [
        _row(
            "folding_hit",
            f"{text} at {tier:g} GiB",
            YES if m is not None and 0.46 <= m <= 0.66 else (DIRECTION if m and m < 0.85 else NO),
            "hit rate = (device hits + restores) / prompt tokens; the drop is set by how often "
            "and how much a task folds (FoldSpec)",
        )
    ]


def paper_rows(
    runs: dict[str, PaperRun | None], facts: dict[str, float | None] | None
) -> list[Row]:
    """Every published claim beside our number, in the order of `replay.paper_data.PUBLISHED`."""
    h20 = runs.get("paper-h20")
    rows = [
        *_workload_rows(facts),
        *_pressure_rows(h20),
        *_h20_rows(h20),
        *_prediction_rows(h20),
        *_admission_rows(h20, runs.get("paper-kappa")),
        *_pool8_rows(runs.get("paper-pool8"), h20),
        *_hardware_rows(runs.get("paper-hardware")),
        *_folding_rows(runs.get("paper-folding"), runs.get("paper-hardware")),
    ]
    order = {p.key: i for i, p in enumerate(PUBLISHED)}
    return sorted(rows, key=lambda r: order.get(r.key, len(order)))
