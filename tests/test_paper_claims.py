"""The EfficientAgent claims as data (`replay.studies.efficientagent`): each check kind on its
boundaries, the one evaluation that turns a claim and our measure into a row, and the claims table
itself (unique keys, sections the page prints, rules that can be evaluated)."""

from __future__ import annotations

import math

import pytest

from replay.report.markdown import md_table
from replay.studies.efficientagent import CLAIMS, DIRECTION, NO, NOT_RUN, YES, claim, paper_rows
from replay.studies.efficientagent.measures import Inputs, Measured, Missing, Outcome
from replay.studies.efficientagent.rule import Check, Claim, Kind
from replay.studies.efficientagent.text import _SECTIONS
from replay.studies.efficientagent.verdict import evaluate


@pytest.mark.parametrize(
    ("check", "published", "passing", "failing"),
    [
        (Check(Kind.NEAR, tol=0.1), 10.0, [9.0, 10.0, 11.0], [8.99, 11.01, math.nan, None]),
        (Check(Kind.NEAR, low=-2.0, tol=0.5), 99.0, [-3.0, -1.0], [-0.99, 0.0]),
        (Check(Kind.BETWEEN, low=-0.05, high=0.05), None, [-0.05, 0.0, 0.05], [0.0501, -0.06]),
        (Check(Kind.INSIDE, low=0.0, high=0.85), None, [1e-9, 0.84], [0.0, 0.85, -0.1]),
        (Check(Kind.IN_RANGE, tol=0.05), (0.51, 0.61), [0.46, 0.55, 0.66], [0.459, 0.661]),
        (Check(Kind.SHARE, low=0.8, high=1.0), 100.0, [80.0, 100.0], [79.9, 100.1]),
        (Check(Kind.ABOVE), 4.0, [4.01], [4.0, 3.0]),
        (Check(Kind.ABOVE, low=0.0), 99.0, [1e-12], [0.0, -1.0]),
        (Check(Kind.AT_LEAST), 0.9, [0.9, 1.0], [0.8999]),
        (Check(Kind.BELOW, high=0.0), None, [-1e-12], [0.0, 1.0]),
        (Check(Kind.AT_MOST, high=-0.5), None, [-0.5, -0.9], [-0.49]),
        (Check(Kind.HOLDS), None, [1.0], [0.0, math.nan]),
        (Check(Kind.ANY), None, [0.0, math.nan, None, -1e300], []),
    ],
)
def test_each_check_kind_on_its_boundaries(check, published, passing, failing):
    for x in passing:
        assert check.passes(x, published), x
    for x in failing:
        assert not check.passes(x, published), x


def test_a_real_check_also_needs_a_real_difference():
    c = Check(Kind.ABOVE, low=0.0, real=True)
    assert c.passes(0.2, None, real=True)
    assert not c.passes(0.2, None, real=False) and not c.passes(0.2, None, real=None)


def test_a_check_that_needs_a_published_number_says_so():
    with pytest.raises(ValueError, match="published number"):
        Check(Kind.NEAR, tol=0.1).passes(1.0, (1.0, 2.0))
    with pytest.raises(ValueError, match="published range"):
        Check(Kind.IN_RANGE).passes(1.0, 1.0)


def _claim(outcome: Outcome, **kw) -> Claim:
    base = dict(
        key="k", section="workload", said="something", value=10.0, unit="count",
        source="somewhere", measure=lambda _: outcome, yes=Check(Kind.NEAR, tol=0.1),
        direction=Check(Kind.BELOW, high=20.0), note="the claim's note",
    )  # fmt: skip
    return Claim(**{**base, **kw})


@pytest.mark.parametrize(
    ("values", "verdict"),
    [
        ((10.5,), YES),
        ((10.5, 9.5), YES),
        ((10.5, 15.0), DIRECTION),  # every value must pass: one outside 10% is direction only
        ((15.0,), DIRECTION),
        ((25.0,), NO),
        ((10.5, 25.0), NO),
        ((None,), NO),
        ((), NO),  # nothing measured passes nothing
    ],
)
def test_one_evaluation_turns_values_into_a_verdict(values, verdict):
    row = evaluate(_claim(Measured("ours", values)), Inputs({}))
    assert row is not None
    assert (row.verdict, row.ours, row.note, row.published) == (
        verdict,
        "ours",
        "the claim's note",
        "10",
    )


def test_no_direction_check_means_no_when_yes_fails():
    row = evaluate(_claim(Measured("x", (15.0,)), direction=None), Inputs({}))
    assert row is not None and row.verdict == NO


def test_not_run_absent_and_a_note_that_depends_on_the_outcome():
    missing = evaluate(_claim(Missing("paper-pool8")), Inputs({}))
    assert missing is not None
    assert (missing.ours, missing.verdict, missing.note) == ("-", NOT_RUN, "run paper-pool8")
    for printed in ("-", "", "nanx (-)"):
        row = evaluate(_claim(Measured(printed, (10.0,))), Inputs({}))
        assert row is not None
        assert (row.verdict, row.note) == (NOT_RUN, "no runs for this point")
    assert evaluate(_claim(None), Inputs({})) is None
    row = evaluate(_claim(Measured("x", (10.0,), note="because")), Inputs({}))
    assert row is not None and row.note == "because"


def test_the_claims_table_is_consistent():
    keys = [c.key for c in CLAIMS]
    assert len(keys) == len(set(keys)) == 37
    sections = {s for s, _ in _SECTIONS}
    for c in CLAIMS:
        assert c.section in sections, c.key
        assert c.source.startswith("study"), c.key
        assert c.yes is not None or c.direction is not None, c.key
        for check in (c.yes, c.direction):
            if check is not None:  # every rule can be evaluated against its published value
                check.passes(0.0, c.value, real=True)
    assert claim("calls").value == 4427 and claim("calls").printed == "4,427"
    assert claim("reuse").printed == "97.0%-98.0%"
    with pytest.raises(KeyError):
        claim("no such claim")


def test_with_nothing_run_only_the_presets_are_judged():
    rows = paper_rows({}, facts=None)
    judged = {r.key: r.verdict for r in rows if r.verdict != NOT_RUN}
    # the hardware presets' compute per host-link byte (2,219, 2,312, 15,461 FLOP per byte) are
    # within 5% of the study's 2.2K, 2.3K and 15.5K
    assert judged == {"cpb_rtx-3090": YES, "cpb_h20": YES, "cpb_h800": YES}
    notes = {r.key: r.note for r in rows if r.verdict == NOT_RUN}
    assert notes["calls"] == "run paper-h20" and notes["folding_hit"] == "run paper-folding"
    # claims that compare points of a run that did not happen have no row at all
    assert "pressure_5" not in notes and "offload_h800" not in notes
    order = [c.key for c in CLAIMS]
    assert [r.key for r in rows] == [k for k in order if k in {r.key for r in rows}]


def test_one_markdown_table_helper_keeps_cells_in_their_column():
    lines = md_table(["a", "b|c"], [["x|y", "two\nlines"], [1, None]])
    assert lines == ["| a | b\\|c |", "|---|---|", "| x\\|y | two lines |", "| 1 | None |", ""]
