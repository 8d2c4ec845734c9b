"""A published claim as a record, and the tests that compare our measure with its number.

A `Claim` says what the study said, where, the number it printed and how ours is measured; its
`yes` and `direction` checks hold the tolerance. Every check is one of a few `Kind`s over one
measured value, so a claim's rule is data that `replay.studies.efficientagent.verdict` evaluates
the same way for every claim.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from replay.studies.efficientagent.measures import Inputs, Outcome

__all__ = ["Kind", "Check", "Claim", "Published"]

Published = float | tuple[float, float] | None


class Kind(StrEnum):
    """How a check compares a measured value x with its bounds (or the published value p)."""

    NEAR = "near"  # |x - t| <= tol * |t|, t = `low` if given, else p
    BETWEEN = "between"  # low <= x <= high
    INSIDE = "inside"  # low < x < high
    IN_RANGE = "in range"  # p = (a, b): a - tol <= x <= b + tol
    SHARE = "share"  # low * p <= x <= high * p
    ABOVE = "above"  # x > low (p when low is None)
    AT_LEAST = "at least"  # x >= low (p when low is None)
    BELOW = "below"  # x < high
    AT_MOST = "at most"  # x <= high
    HOLDS = "holds"  # a finding measured as 1 (holds) or 0 (does not)
    ANY = "any"  # every measured value passes


@dataclass(frozen=True)
class Check:
    """One test on a measured value; `real` also asks the measured difference to be real."""

    kind: Kind
    low: float | None = None
    high: float | None = None
    tol: float = 0.0
    real: bool = False

    def passes(self, x: float | None, published: Published, real: bool | None = None) -> bool:
        """Whether `x` passes (a NaN, an unknown value, passes only `ANY`)."""
        if self.real and not real:
            return False
        if self.kind is Kind.ANY:
            return True
        if x is None or not math.isfinite(x):
            return False
        k = self.kind
        if k is Kind.NEAR:
            t = self.low if self.low is not None else _point(published)
            return abs(x - t) <= self.tol * abs(t)
        if k is Kind.IN_RANGE:
            a, b = _range(published)
            return a - self.tol <= x <= b + self.tol
        if k is Kind.SHARE:
            p = _point(published)
            return _bound(self.low) * p <= x <= _bound(self.high) * p
        if k is Kind.BETWEEN:
            return _bound(self.low) <= x <= _bound(self.high)
        if k is Kind.INSIDE:
            return _bound(self.low) < x < _bound(self.high)
        if k is Kind.ABOVE:
            return x > (self.low if self.low is not None else _point(published))
        if k is Kind.AT_LEAST:
            return x >= (self.low if self.low is not None else _point(published))
        if k is Kind.BELOW:
            return x < _bound(self.high)
        if k is Kind.AT_MOST:
            return x <= _bound(self.high)
        return x == 1.0  # Kind.HOLDS


def _point(p: Published) -> float:
    if not isinstance(p, (int, float)):
        raise ValueError(f"this check needs a published number, not {p!r}")
    return float(p)


def _range(p: Published) -> tuple[float, float]:
    if not isinstance(p, tuple):
        raise ValueError(f"this check needs a published range, not {p!r}")
    return p


def _bound(b: float | None) -> float:
    if b is None:
        raise ValueError("this check needs both bounds")
    return b


@dataclass(frozen=True)
class Claim:
    """One published claim: `said` (what the study says) and `source` (where), `value` as printed
    (a number, a (low, high) range, or None for a claim with no number) in `unit`; `measure`
    gives ours; `yes` decides whether the number reproduces, `direction` (when `yes` fails)
    whether the qualitative claim still holds; `note` is printed beside the verdict."""

    key: str
    section: str
    said: str
    value: Published
    unit: str
    source: str
    measure: Callable[[Inputs], Outcome]
    yes: Check | None = None
    direction: Check | None = None
    note: str = ""

    @property
    def printed(self) -> str:
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
