"""A published claim as a record, and the one rule that judges every claim against our number.

The rule (stated at the top of docs/paper.md, `RULE`): a number *reproduces* when our 95% interval
overlaps the published value (or range) widened by one tolerance, ±15% relative, or ±5 points for
a share or a relative change; it holds in *direction* when our point estimate has the published
sign (against the claim's no-effect value) and is within 2x of it; otherwise *no*. A claim
without a number (a finding) reproduces when the test its note states holds on our point
estimates, else no.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from replay.studies.efficientagent.measures import Inputs, Outcome

__all__ = ["Role", "Claim", "Published", "RULE", "REL_TOL", "POINTS_TOL", "judge", "widened"]

Published = float | tuple[float, float] | None

REL_TOL = 0.15  # a number: its published range widened by 15% of each end
POINTS_TOL = 0.05  # a share or a relative change (unit "fraction"): widened by 5 points
WITHIN = 2.0  # direction: the point estimate within this factor of the published effect

RULE = (
    "One rule, applied by code to every row: a number **reproduces** (`yes`) when our 95% "
    "interval overlaps the published value or range widened by ±15% (relative), or by ±5 "
    "points for a share or a relative change; it holds in **direction** when our point estimate "
    "has the published sign (a change against no change, a ratio against 1) and is within 2x of "
    "the published effect; otherwise **no**. A claim without a number (a finding) is `yes` when "
    "the test its note states holds on our point estimates, else `no`; where a measure picks one "
    "of several values (the best tier, the smallest change), its note says which. Only the "
    "outcomes count in the score; the inputs (what the workload was calibrated to) and the "
    "self-consistency rows (our model against our own simulator, a point with no interval) are "
    "shown, judged by the same rule, and not counted. An interval of two repeats is wide "
    "(t = 12.7): a `yes` by overlap can also hold no change, so read each verdict with the "
    "interval printed beside it."
)

YES, DIRECTION, NO = "yes", "direction", "no"


class Role(StrEnum):
    """What a row is evidence of: only outcomes are counted."""

    INPUT = "input"
    OUTCOME = "outcome"
    SELF = "self-consistency"


def widened(value: Published, unit: str) -> tuple[float, float]:
    """The published value or range widened by the rule's one tolerance."""
    if value is None:
        raise ValueError("a finding has no number to widen")
    a, b = value if isinstance(value, tuple) else (value, value)
    if unit == "fraction":
        return a - POINTS_TOL, b + POINTS_TOL
    return a - REL_TOL * abs(a), b + REL_TOL * abs(b)


def judge(
    value: Published, unit: str, null: float | None, point: float, low: float, high: float
) -> str:
    """The rule on one measured quantity: `point` with 95% interval [`low`, `high`]."""
    if not all(math.isfinite(x) for x in (point, low, high)):
        return NO
    if value is None:  # a finding, measured as 1 (holds) or 0
        return YES if point == 1.0 else NO
    a, b = widened(value, unit)
    if low <= b and high >= a:
        return YES
    p = value[0] if isinstance(value, tuple) and math.isinf(value[1]) else value
    p = (p[0] + p[1]) / 2 if isinstance(p, tuple) else p
    base = 0.0 if null is None else null
    effect, ours = p - base, point - base
    # same sign and within 2x: the ratio of the effects lies in [1/2, 2]
    if effect and 1 / WITHIN <= ours / effect <= WITHIN:
        return DIRECTION
    return NO


@dataclass(frozen=True)
class Claim:
    """One published claim: `said` (what the study says) and `source` (where), `value` as printed
    (a number, a (low, high) range, or None for a finding with no number) in `unit`; `null` is
    the no-effect value its direction is read against (0 for a change, 1 for a ratio, None for a
    level); `measure` gives ours; `role` says whether the row counts; `note` explains a gap."""

    key: str
    section: str
    said: str
    value: Published
    unit: str
    source: str
    measure: Callable[[Inputs], Outcome]
    role: Role = Role.OUTCOME
    null: float | None = None
    note: str = ""

    @property
    def printed(self) -> str:
        """The published value as the study printed it."""
        v = self.value
        if v is None:
            return "holds"
        if isinstance(v, tuple) and math.isinf(v[1]):
            return f"> {_num(v[0], self.unit)}"
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
    if unit in ("GiB", "min", "s"):
        return f"{x:g} {unit}"
    return f"{x:,.0f}" if x >= 100 else f"{x:g}"
