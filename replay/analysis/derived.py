"""Derived metrics: one small function per number, its formula in the docstring.

Each function works on scalars and on aligned pandas Series alike. A ratio whose denominator is
zero or unknown is NaN (not 0): "no restores" does not mean "a write:read ratio of zero".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from replay.counters import COMPUTED_PREFILL_TOKENS
from replay.status import RunStatus

__all__ = [
    "DERIVED_METRICS",
    "TIER_PARAM",
    "add_derived",
    "computed_prefill_fraction",
    "device_hit_fraction",
    "evicted_unread_fraction",
    "host_hit_fraction",
    "pressure_ratio",
    "recorded_makespan_s",
    "relative_makespan",
    "slowdown_vs_recorded",
    "write_read_ratio",
]

TIER_PARAM = "host_tier_gib"


def _ratio(num: Any, den: Any) -> Any:
    num = pd.to_numeric(num, errors="coerce")
    den = pd.to_numeric(den, errors="coerce")
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.divide(np.asarray(num, dtype=float), np.asarray(den, dtype=float))
    # x/0 is undefined for a fraction of tokens; keep it visible as NaN rather than inf.
    out = np.where(np.asarray(den, dtype=float) == 0, np.nan, out)
    if isinstance(num, pd.Series):
        return pd.Series(out, index=num.index)
    if isinstance(den, pd.Series):
        return pd.Series(out, index=den.index)
    return float(out)


def computed_prefill_fraction(computed_prefill_tokens: Any, prompt_tokens: Any) -> Any:
    """computed_prefill_tokens / prompt_tokens: the share of prompt tokens the engine computed."""
    return _ratio(computed_prefill_tokens, prompt_tokens)


def device_hit_fraction(device_hit_tokens: Any, prompt_tokens: Any) -> Any:
    """device_hit_tokens / prompt_tokens: the share served from KV already on the device."""
    return _ratio(device_hit_tokens, prompt_tokens)


def host_hit_fraction(host_restore_tokens: Any, prompt_tokens: Any) -> Any:
    """host_restore_tokens / prompt_tokens: the share loaded back from the host tier."""
    return _ratio(host_restore_tokens, prompt_tokens)


def write_read_ratio(host_write_tokens: Any, host_restore_tokens: Any) -> Any:
    """host_write_tokens / host_restore_tokens: tokens written to the host tier per token read back."""
    return _ratio(host_write_tokens, host_restore_tokens)


def evicted_unread_fraction(chunks_evicted_unread: Any, chunks_written: Any) -> Any:
    """chunks_evicted_unread / chunks_written: written chunks evicted before any call read them."""
    return _ratio(chunks_evicted_unread, chunks_written)


def relative_makespan(makespan_s: Any, baseline_makespan_s: Any) -> Any:
    """makespan_s / baseline_makespan_s: below 1 is faster than the baseline point."""
    return _ratio(makespan_s, baseline_makespan_s)


def slowdown_vs_recorded(makespan_s: Any, recorded_makespan_s: Any) -> Any:
    """makespan_s / recorded_makespan_s: replay time over the time the recorded run took."""
    return _ratio(makespan_s, recorded_makespan_s)


def recorded_makespan_s(recorded: Iterable[Mapping[str, Any] | None]) -> float | None:
    """max(end_s) - min(start_s) over the calls whose recorded timings have both: how long the
    recorded run took, first call start to last call end. None when no call has both."""
    starts, ends = [], []
    for rec in recorded:
        if rec and rec.get("start_s") is not None and rec.get("end_s") is not None:
            starts.append(float(rec["start_s"]))
            ends.append(float(rec["end_s"]))
    return max(ends) - min(starts) if starts else None


def pressure_ratio(working_set_gib: Any, host_tier_gib: Any) -> Any:
    """working_set_gib / host_tier_gib: above 1 the tier cannot hold what the pool reuses (tier 0: NaN)."""
    return _ratio(working_set_gib, host_tier_gib)


# Derived column -> (function, input columns). Columns whose inputs are absent are not added.
DERIVED_METRICS: Mapping[str, tuple[Any, tuple[str, str]]] = {
    "computed_prefill_fraction": (
        computed_prefill_fraction,
        (COMPUTED_PREFILL_TOKENS, "prompt_tokens"),
    ),
    "device_hit_fraction": (device_hit_fraction, ("device_hit_tokens", "prompt_tokens")),
    "host_hit_fraction": (host_hit_fraction, ("host_restore_tokens", "prompt_tokens")),
    "write_read_ratio": (write_read_ratio, ("host_write_tokens", "host_restore_tokens")),
    "evicted_unread_fraction": (
        evicted_unread_fraction,
        ("chunks_evicted_unread", "chunks_written"),
    ),
    "slowdown_vs_recorded": (slowdown_vs_recorded, ("makespan_s", "recorded_makespan_s")),
}


def add_derived(
    runs: pd.DataFrame,
    params: Sequence[str] = (),
    baseline: Mapping[str, Any] | None = None,
    design: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """A copy of `runs` with every derived column whose inputs exist.

    `relative_makespan` divides each run's makespan by the mean makespan of the matching baseline
    runs: those equal to `baseline` on its keys and to the run on every other parameter that the
    baseline points vary in. Default baseline: the smallest host tier (no offload when the sweep
    has a 0 GiB point). Both come from `design` (the parameters of every planned point; default:
    `runs`), not from the runs that finished: with the baseline's pool-8 runs failed, a pool-8
    run was divided by the pool-4 baseline, as if pool were not part of the design.
    """
    design = runs if design is None else design
    out = runs.copy()
    for name, (fn, inputs) in DERIVED_METRICS.items():
        if all(c in out.columns for c in inputs):
            out[name] = fn(out[inputs[0]], out[inputs[1]])
    if baseline is None and TIER_PARAM in params and TIER_PARAM in design.columns:
        tiers = pd.to_numeric(design[TIER_PARAM], errors="coerce").dropna()
        if not tiers.empty:
            baseline = {TIER_PARAM: tiers.min()}
    if baseline and "makespan_s" in out.columns:
        out["relative_makespan"] = _relative_to_baseline(out, params, baseline, design)
    return out


def baseline_matched_on(
    design: pd.DataFrame, baseline: Mapping[str, Any], params: Sequence[str]
) -> list[str]:
    """The parameters of `params` a baseline is matched on: those its planned points (the rows
    of `design` equal to `baseline`) take several values of. A 0 GiB point planned only with
    admission "all" is the no-offload baseline of every admission policy (admission cannot act
    without a tier). From the plan, not from the runs that finished: with the pool-8 baseline
    runs failed, pool-8 points were compared with the pool-4 baseline and called real."""
    planned = design
    for key, value in baseline.items():
        if key not in planned.columns:
            return []
        planned = planned[planned[key].eq(value)]
    return [
        p
        for p in params
        if p not in baseline and p in planned.columns and planned[p].nunique(dropna=False) > 1
    ]


def _relative_to_baseline(
    runs: pd.DataFrame, params: Sequence[str], baseline: Mapping[str, Any], design: pd.DataFrame
) -> pd.Series:
    ok = (
        runs["status"].eq(RunStatus.OK)
        if "status" in runs.columns
        else pd.Series(True, index=runs.index)
    )
    is_base = ok.copy()
    for key, value in baseline.items():
        is_base &= runs[key].eq(value)
    base = runs[is_base]
    others = baseline_matched_on(design, baseline, [p for p in params if p in runs.columns])
    if others:
        means = base.groupby(others, dropna=False)["makespan_s"].mean()
        keys = (
            pd.MultiIndex.from_frame(runs[others]) if len(others) > 1 else pd.Index(runs[others[0]])
        )
        base_makespan = pd.Series(means.reindex(keys).to_numpy(), index=runs.index)
    else:
        base_makespan = pd.Series(base["makespan_s"].mean(), index=runs.index)
    return relative_makespan(runs["makespan_s"], base_makespan)
