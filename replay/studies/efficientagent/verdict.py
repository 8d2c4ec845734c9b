"""Every claim beside our number, judged by the one rule of `rule.judge`.

Verdicts: `yes`, `direction`, `no` (see `rule.RULE`), `not run` (the experiment that measures it
did not run, or ran without this point). A claim measured by several values (one per kappa, per
tier) takes the worst of their verdicts. Each row keeps the numbers it was judged on, so a test
can apply the rule to them again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from replay.studies.efficientagent.claims import CLAIMS
from replay.studies.efficientagent.measures import Inputs, Missing
from replay.studies.efficientagent.rule import DIRECTION, NO, YES, Claim, Published, judge
from replay.studies.efficientagent.runs import PaperRun

__all__ = ["YES", "DIRECTION", "NO", "NOT_RUN", "Row", "evaluate", "paper_rows"]

NOT_RUN = "not run"
_ORDER = (NO, DIRECTION, YES)


@dataclass(frozen=True)
class Row:
    """One claim beside our number: `ours` is printed text, `verdict` one of the four above;
    `value`, `unit`, `null` and `numbers` ((point, low, high) per measured value) are what the
    rule judged, `role` whether the row counts."""

    key: str
    section: str
    claim: str
    published: str
    ours: str
    verdict: str
    note: str = ""
    role: str = "outcome"
    source: str = ""
    value: Published = None
    unit: str = ""
    null: float | None = None
    numbers: tuple[tuple[float, float, float], ...] = ()


def evaluate(claim: Claim, inputs: Inputs) -> Row | None:
    """`claim` beside our measure of it (None: the runs cannot make this comparison)."""
    m = claim.measure(inputs)
    if m is None:
        return None

    def row(ours: str, verdict: str, note: str, numbers=()) -> Row:
        return Row(
            claim.key, claim.section, claim.said, claim.printed, ours, verdict, note,
            str(claim.role), claim.source, claim.value, claim.unit, claim.null, numbers,
        )  # fmt: skip

    if isinstance(m, Missing):
        return row("-", NOT_RUN, f"run {m.what}" if m.what.startswith("paper-") else m.what)
    if m.ours in ("-", "") or m.ours.startswith("nan"):
        return row("-", NOT_RUN, "no runs for this point")
    numbers = tuple(e.interval() for e in m.values)
    verdicts = [judge(claim.value, claim.unit, claim.null, *n) for n in numbers] or [NO]
    verdict = min(verdicts, key=_ORDER.index)
    return row(m.ours, verdict, claim.note if m.note is None else m.note, numbers)


def paper_rows(
    runs: Mapping[str, PaperRun | None], facts: Mapping[str, float | None] | None
) -> list[Row]:
    """Every published claim beside our number, in the order of `CLAIMS`."""
    inputs = Inputs(runs, facts)
    return [r for c in CLAIMS if (r := evaluate(c, inputs)) is not None]
