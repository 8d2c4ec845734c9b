"""Every claim beside our number, judged by one evaluation of the claim's data.

Verdicts: `yes` (every measured value passes the claim's `yes` check), `direction` (the
qualitative claim holds, the number differs: every value passes `direction`), `no`, `not run`
(the experiment that measures it did not run, or ran without this point).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from replay.studies.efficientagent.claims import CLAIMS
from replay.studies.efficientagent.measures import Inputs, Measured, Missing
from replay.studies.efficientagent.rule import Check, Claim
from replay.studies.efficientagent.runs import PaperRun

__all__ = ["YES", "DIRECTION", "NO", "NOT_RUN", "Row", "evaluate", "paper_rows"]

YES, DIRECTION, NO, NOT_RUN = "yes", "direction", "no", "not run"


@dataclass(frozen=True)
class Row:
    """One claim beside our number: `ours` is printed text, `verdict` one of the four above."""

    key: str
    section: str
    claim: str
    published: str
    ours: str
    verdict: str
    note: str = ""


def _all_pass(check: Check | None, claim: Claim, m: Measured) -> bool:
    return (
        check is not None
        and bool(m.values)
        and all(check.passes(x, claim.value, m.real) for x in m.values)
    )


def evaluate(claim: Claim, inputs: Inputs) -> Row | None:
    """`claim` beside our measure of it (None: the runs cannot make this comparison)."""
    m = claim.measure(inputs)
    if m is None:
        return None

    def row(ours: str, verdict: str, note: str) -> Row:
        return Row(claim.key, claim.section, claim.said, claim.printed, ours, verdict, note)

    if isinstance(m, Missing):
        return row("-", NOT_RUN, f"run {m.what}")
    if m.ours in ("-", "") or m.ours.startswith("nan"):
        return row("-", NOT_RUN, "no runs for this point")
    if _all_pass(claim.yes, claim, m):
        verdict = YES
    elif _all_pass(claim.direction, claim, m):
        verdict = DIRECTION
    else:
        verdict = NO
    return row(m.ours, verdict, claim.note if m.note is None else m.note)


def paper_rows(
    runs: Mapping[str, PaperRun | None], facts: Mapping[str, float | None] | None
) -> list[Row]:
    """Every published claim beside our number, in the order of `CLAIMS`."""
    inputs = Inputs(runs, facts)
    return [r for c in CLAIMS if (r := evaluate(c, inputs)) is not None]
