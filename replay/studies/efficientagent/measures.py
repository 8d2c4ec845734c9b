"""Our side of each published claim: a function of the paper-* results (and the trace's facts).

Each measure returns what the rule tests (`Measured.values`: point estimates with their 95%
intervals, every one judged) and the text printed beside the study's number, `Missing(what)` when the experiment it needs did not run,
or None when the claim has no row on this page (a comparison the runs cannot make). Measures know
the experiments' points (which tier, which policy) but no published number: those are the claims'.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from replay.analysis.aggregate import describe
from replay.analysis.compare import Comparison, welch_compare
from replay.analysis.predictions import agrees
from replay.analysis.words import fmt_interval, fmt_num
from replay.studies.efficientagent.runs import PaperRun, cmp_text, pct, ratio_text, stat_text

__all__ = ["Est", "Inputs", "Measured", "Missing", "Outcome", "mean_or_none", "est_of", "est_cmp"]


@dataclass(frozen=True)
class Inputs:
    """What every measure reads: the loaded paper-* runs (None: not run) and the trace's facts."""

    runs: Mapping[str, PaperRun | None]
    facts: Mapping[str, float | None] | None = None

    def run(self, name: str) -> PaperRun | None:
        return self.runs.get(name)


@dataclass(frozen=True)
class Est:
    """One measured quantity: `point` and its 95% interval (the point itself when unknown, e.g.
    one repeat or a preset's number)."""

    point: float | None
    low: float | None = None
    high: float | None = None

    def interval(self) -> tuple[float, float, float]:
        """(point, low, high) as floats (NaN when nothing was measured)."""
        p = math.nan if self.point is None else float(self.point)
        lo = p if self.low is None or not math.isfinite(self.low) else float(self.low)
        hi = p if self.high is None or not math.isfinite(self.high) else float(self.high)
        return p, lo, hi


def est_of(values: np.ndarray) -> Est:
    """The mean over repeats with its 95% t interval."""
    s = describe(values.tolist())
    return Est(s.mean if s.n else None, s.ci_low, s.ci_high)


def est_cmp(c: Comparison, ratio: bool = False) -> Est:
    """A Welch comparison as a relative change (or, with `ratio`, as b / a)."""
    if c.verdict == "no data":
        return Est(None)
    k = 1.0 if ratio else 0.0
    return Est(k + c.rel_diff, k + c.rel_low, k + c.rel_high)


@dataclass(frozen=True)
class Measured:
    """Our number: `ours` printed, `values` judged by the rule (an unknown value is `no`), `note`
    when the explanation depends on the outcome (it replaces the claim's own note)."""

    ours: str
    values: tuple[Est, ...] = ()
    note: str | None = None


@dataclass(frozen=True)
class Missing:
    """The experiment (`what`, as in `run paper-h20`) that would measure this claim."""

    what: str = field(default="paper-h20")


Outcome = Measured | Missing | None


def mean_or_none(values: np.ndarray) -> float | None:
    return float(values.mean()) if len(values) else None


# -- the workload (facts of the trace paper-h20 ran) ------------------------------------------


def fact(name: str, text: str = "num") -> Any:
    """The trace fact `name`, printed as a count, a token number or an unsigned percentage."""

    def measure(i: Inputs) -> Outcome:
        if not i.facts:
            return Missing()
        x = i.facts[name]
        if x is None:
            return Measured("-", (Est(None),))
        if text == "count":
            return Measured(f"{x:,}", (Est(x),))
        if text == "s":
            return Measured(f"{x:.2f} s", (Est(x),))
        return Measured(fmt_num(x) if text == "num" else pct(x, signed=False), (Est(x),))

    return measure


# -- working set and pressure -----------------------------------------------------------------


def working_set(i: Inputs) -> Outcome:
    h20 = i.run("paper-h20")
    ws = h20.working_set_gib() if h20 is not None else None
    return Missing() if ws is None else Measured(f"{ws:.2f} GiB", (Est(ws),))


def pressure(tier_gib: float) -> Any:
    """Working set / tier; no row without a working set (the working-set row says why)."""

    def measure(i: Inputs) -> Outcome:
        h20 = i.run("paper-h20")
        ws = h20.working_set_gib() if h20 is not None else None
        if ws is None:
            return Missing("paper-h20 (with predictions)" if h20 is not None else "paper-h20")
        return Measured(f"{ws / tier_gib:.2f}", (Est(ws / tier_gib),))

    return measure


# -- paper-h20, plain offload ------------------------------------------------------------------

_ALL = {"admission": "all"}


def makespan_ratio(tier_gib: float) -> Any:
    """Makespan at `tier_gib` over makespan with no tier."""

    def measure(i: Inputs) -> Outcome:
        h20 = i.run("paper-h20")
        if h20 is None:
            return Missing()
        # the baseline of the same admission: at 0 GiB the three policies are the same runs
        # (no tier to admit to), so all of them counted each repeat three times as if apart
        base = h20.values("makespan_s", host_tier_gib=0, **_ALL)
        c = welch_compare(base, h20.values("makespan_s", host_tier_gib=tier_gib, **_ALL))
        return Measured(ratio_text(c), (est_cmp(c, ratio=True),))

    return measure


def mean_at_5(metric: str, percent: bool) -> Any:
    """Mean of `metric` over repeats at 5 GiB, plain offload."""

    def measure(i: Inputs) -> Outcome:
        h20 = i.run("paper-h20")
        if h20 is None:
            return Missing()
        v = h20.values(metric, host_tier_gib=5, **_ALL)
        fmt = (lambda x: pct(x, signed=False)) if percent else (lambda x: f"{x:.1f}")
        return Measured(stat_text(v, fmt), (est_of(v),))

    return measure


def prefill_change_20(i: Inputs) -> Outcome:
    h20 = i.run("paper-h20")
    if h20 is None:
        return Missing()
    c = welch_compare(
        h20.values("computed_prefill_tokens", host_tier_gib=0, **_ALL),
        h20.values("computed_prefill_tokens", host_tier_gib=20, **_ALL),
    )
    return Measured(cmp_text(c), (est_cmp(c),))


def flat_past_20(i: Inputs) -> Outcome:
    """Computed prefill at 40 and 80 GiB against 20 GiB (no row when none of them ran)."""
    h20 = i.run("paper-h20")
    if h20 is None:
        return Missing()
    cp20 = h20.values("computed_prefill_tokens", host_tier_gib=20, **_ALL)
    flat = []
    for tier in (40, 80):
        c = welch_compare(cp20, h20.values("computed_prefill_tokens", host_tier_gib=tier, **_ALL))
        if c.verdict != "no data":
            flat.append((tier, c))
    if not flat:
        return Missing("paper-h20 (with 40 GiB)")
    text = "; ".join(f"{t} GiB: {pct(c.rel_diff)}" for t, c in flat)
    return Measured(text, tuple(est_cmp(c) for _, c in flat))


def repeat_spread_40(i: Inputs) -> Outcome:
    """(max - min) / mean of the makespans over repeats at 40 GiB."""
    h20 = i.run("paper-h20")
    if h20 is None:
        return Missing()
    v = h20.values("makespan_s", host_tier_gib=40, **_ALL)
    if len(v) < 2:
        return Missing("paper-h20 (two or more repeats at 40 GiB)")
    spread = float((v.max() - v.min()) / v.mean())
    note = (
        "the simulator's only noise is its seeded service-time jitter (jitter = 0.05), far "
        "below a real server's run-to-run spread"
    )
    return Measured(f"{pct(spread, signed=False)} (n={len(v)})", (Est(spread),), note=note)


def turn_gap_5(i: Inputs) -> Outcome:
    """Median time between one agent's consecutive sends at 5 GiB (plain offload), and that
    over the trace's median own time between calls (`own_gap_median_s`)."""
    h20 = i.run("paper-h20")
    if h20 is None:
        return Missing()
    gaps = h20.turn_gaps(host_tier_gib=5, **_ALL)
    if not len(gaps):
        return Missing("paper-h20 (with calls.jsonl)")
    med = float(np.median(gaps))
    own = (i.facts or {}).get("own_gap_median_s")
    text = f"{med:.2f} s"
    if own:
        text += f" = {med / own:.1f}x the trace's own time ({own:.2f} s)"
    return Measured(text, (Est(med),))


# -- pre-registered predictions ----------------------------------------------------------------


def prediction(tier_gib: float, quantity: str) -> Any:
    """Our pre-registered prediction's error against our measurement, (predicted - measured) /
    measured, beside the study's model's error (self-consistency: our model, our simulator)."""

    def measure(i: Inputs) -> Outcome:
        h20 = i.run("paper-h20")
        if h20 is None:
            return Missing()
        pred = h20.prediction(quantity, tier_gib, **_ALL)
        meas = h20.values(quantity, host_tier_gib=tier_gib, **_ALL)
        if pred is None or not len(meas):
            return Missing("paper-h20 (with predictions)")
        low = h20.prediction(f"{quantity}_low", tier_gib, **_ALL)
        high = h20.prediction(f"{quantity}_high", tier_gib, **_ALL)
        s = describe(meas.tolist())
        err = (pred - s.mean) / s.mean if s.mean else math.nan
        text = f"predicted {fmt_num(pred)}"
        if low is not None and high is not None:
            text += f" [{fmt_num(low)}-{fmt_num(high)}]"
        ok = agrees(
            pred, math.nan if low is None else low, math.nan if high is None else high,
            s.mean, s.ci_low, s.ci_high, s.n,
        )  # fmt: skip
        text += (
            f", measured {fmt_interval(s.mean, s.half_width, s.n)}, error {pct(err)}"
            f"{'' if isinstance(ok, float) else ('; range overlaps' if ok else '; range misses')}"
        )
        return Measured(text, (Est(err),))

    return measure


# -- write admission ---------------------------------------------------------------------------


def _admission_run(i: Inputs, name: str = "paper-h20") -> PaperRun | None:
    run = i.run(name)
    return run if run is not None and "admission" in run.params else None


def policy_change(
    metric: str, tier_gib: float, policy: str, as_ratio: bool = False, run: str = "paper-h20"
) -> Any:
    """`policy` against plain offload at `tier_gib`: the relative change of `metric` (or, with
    `as_ratio`, policy / plain)."""

    def measure(i: Inputs) -> Outcome:
        h20 = _admission_run(i, run)
        if h20 is None:
            return Missing(run)
        c: Comparison = welch_compare(
            h20.values(metric, host_tier_gib=tier_gib, admission="all"),
            h20.values(metric, host_tier_gib=tier_gib, admission=policy),
        )
        if as_ratio:
            return Measured(f"{1 + c.rel_diff:.2f}x ({cmp_text(c)})", (est_cmp(c, ratio=True),))
        return Measured(cmp_text(c), (est_cmp(c),))

    return measure


def _declined(run: PaperRun, **where: Any) -> np.ndarray:
    """Share of candidate writes the fixed filter declines, per run at `where`."""
    # paper-kappa fixes the tier and the policy in its engine table, not its matrix
    fixed = {"host_tier_gib": 5, "admission": "fixed"}
    where = {**{k: v for k, v in fixed.items() if k in run.ok.columns}, **where}
    written = run.values("chunks_written", **where)
    declined = run.values("declined_writes", **where)
    if not len(written) or len(declined) != len(written):
        return np.empty(0)
    return declined / (declined + written)


def declined_5(i: Inputs) -> Outcome:
    """Per kappa from paper-kappa where it ran, else paper-h20's kappa 8."""
    kappa = i.run("paper-kappa")
    if kappa is not None and "kappa" in kappa.ok.columns:
        ks = sorted({int(k) for k in kappa.ok["kappa"]})
        fr = {k: v for k in ks if len(v := _declined(kappa, kappa=k))}
        if fr:
            text = "; ".join(
                f"kappa {k}: {pct(float(v.mean()), signed=False)}" for k, v in fr.items()
            )
            return Measured(
                text, tuple(est_of(v) for v in fr.values()), note="paper-kappa: fixed at 5 GiB"
            )
    h20 = _admission_run(i)
    f8 = _declined(h20) if h20 is not None else np.empty(0)
    if not len(f8):
        return Missing()
    return Measured(
        stat_text(f8, lambda x: pct(x, signed=False)) + " (fixed, kappa 8)",
        (est_of(f8),),
        note="only kappa = 8 ran (paper-kappa sweeps 2-16)",
    )


def evicted_anyway(tier_gib: float) -> Any:
    """Proposition 1: the share of chunks the fixed filter declined whose next reuse lies at a
    stack distance of at least the tier's capacity (in chunks), or never comes."""

    def measure(i: Inputs) -> Outcome:
        h20 = _admission_run(i)
        if h20 is None:
            return Missing()
        where = {"host_tier_gib": tier_gib, "admission": "fixed"}
        within = h20.values("declined_reused_within", **where)
        beyond = h20.values("declined_reused_beyond", **where)
        never = h20.values("declined_never_reused", **where)
        if not len(within) or not len(beyond) == len(never) == len(within):
            return Missing("paper-h20 (with the decline-reuse counters)")
        total = within + beyond + never
        share = (beyond + never)[total > 0] / total[total > 0]
        if not len(share):
            return Measured("nothing declined", (Est(None),))
        text = stat_text(share, lambda x: pct(x, signed=False))
        return Measured(
            f"{text}; declined chunks: {fmt_num(float(total.mean()))}", (est_of(share),)
        )

    return measure


def makespan_tracks_prefill(i: Inputs) -> Outcome:
    """Pearson correlation of makespan and computed prefill over the distinct paper-h20 runs;
    the finding holds at r >= 0.9. Without a host tier the admission decides nothing, so the
    0 GiB runs of other admissions are the `all` runs again: counted once, not three times."""
    h20 = i.run("paper-h20")
    if h20 is None:
        return Missing()
    ok = h20.ok
    if "admission" in ok.columns and "host_tier_gib" in ok.columns:
        tier = pd.to_numeric(ok["host_tier_gib"], errors="coerce")
        ok = ok[(tier != 0) | (ok["admission"] == "all")]
    pair = ok.reindex(columns=["makespan_s", "computed_prefill_tokens"]).apply(
        pd.to_numeric, errors="coerce"
    )
    pair = pair[np.isfinite(pair.to_numpy(dtype=float)).all(axis=1)]
    ms, cp = pair["makespan_s"].to_numpy(), pair["computed_prefill_tokens"].to_numpy()
    if len(ms) < 3:  # paired above: the two have one length
        return Missing("paper-h20 (three or more runs)")
    r = float(np.corrcoef(ms, cp)[0, 1])
    return Measured(f"r = {r:.2f} over {len(ms)} runs", (Est(1.0 if r >= 0.9 else 0.0),))
