"""The EfficientAgent claims as data (`replay.studies.efficientagent`): the one verdict rule on its
boundaries, every row's verdict re-derived from its own numbers by an independent statement of the
rule, the published numbers as the study gave them, and a score that counts outcomes only."""

from __future__ import annotations

import math

import pytest

from replay.report.markdown import md_table
from replay.studies.efficientagent import CLAIMS, DIRECTION, NO, NOT_RUN, YES, claim, paper_rows
from replay.studies.efficientagent.measures import Est, Inputs, Measured, Missing, Outcome
from replay.studies.efficientagent.prose import SECTIONS
from replay.studies.efficientagent.rule import Claim, Role, judge
from replay.studies.efficientagent.text import score_line
from replay.studies.efficientagent.verdict import Row, evaluate


def rule_by_hand(value, unit, null, point, low, high) -> str:
    """The rule as docs/paper.md states it, written apart from `rule.judge`."""
    if any(math.isnan(x) for x in (point, low, high)):
        return NO
    if value is None:
        return YES if point == 1.0 else NO
    lo, hi = value if isinstance(value, tuple) else (value, value)
    if unit == "fraction":
        lo, hi = lo - 0.05, hi + 0.05
    else:
        lo, hi = lo * (0.85 if lo > 0 else 1.15), hi * (1.15 if hi > 0 else 0.85)
    if not (high < lo or low > hi):
        return YES
    ref = value[0] if isinstance(value, tuple) and math.isinf(value[1]) else value
    ref = sum(ref) / 2 if isinstance(ref, tuple) else ref
    z = null or 0.0
    if (ref - z) * (point - z) > 0 and 0.5 <= (point - z) / (ref - z) <= 2.0:
        return DIRECTION
    return NO


def assert_rows_follow_the_rule(rows: list[Row]) -> None:
    order = [NO, DIRECTION, YES]
    for r in rows:
        if r.verdict == NOT_RUN:
            assert not r.numbers, r.key
            continue
        assert r.numbers, r.key
        each = [rule_by_hand(r.value, r.unit, r.null, *n) for n in r.numbers]
        assert r.verdict == min(each, key=order.index), (r.key, r.numbers, r.verdict)


@pytest.mark.parametrize(
    ("value", "unit", "null", "est", "verdict"),
    [
        (10.0, "count", None, (11.4, 11.4, 11.6), YES),  # interval reaches 11.5 = 10 + 15%
        (10.0, "count", None, (12.0, 11.6, 12.4), DIRECTION),  # misses 11.5, within 2x
        (10.0, "count", None, (20.0, 19.0, 21.0), DIRECTION),
        (10.0, "count", None, (20.1, 20.1, 20.1), NO),  # more than 2x
        (10.0, "count", None, (4.9, 4.9, 4.9), NO),
        (-0.36, "fraction", 0.0, (-0.30, -0.31, -0.29), YES),  # -31% is 5 points from -36%
        (-0.36, "fraction", 0.0, (-0.20, -0.22, -0.18), DIRECTION),
        (-0.36, "fraction", 0.0, (0.10, 0.05, 0.15), NO),  # wrong sign
        (-0.36, "fraction", 0.0, (-0.17, -0.17, -0.17), NO),  # under half the effect
        (4.3, "x", 1.0, (27.5, 27.0, 28.0), NO),  # the old one-sided `> 4` passed this
        (4.3, "x", 1.0, (4.9, 4.8, 5.0), YES),
        (4.3, "x", 1.0, (2.7, 2.6, 2.8), DIRECTION),  # effect 1.7 vs 3.3: within 2x
        (4.3, "x", 1.0, (2.6, 2.5, 2.7), NO),  # effect 1.6 vs 3.3: over 2x off
        (0.6, "ratio", 1.0, (0.51, 0.50, 0.52), YES),  # 0.6 - 15% = 0.51
        ((0.84, 0.85), "fraction", None, (0.78, 0.70, 0.785), DIRECTION),  # misses 0.79 by a hair
        ((0.84, 0.85), "fraction", None, (0.60, 0.55, 0.65), DIRECTION),
        ((6.0, math.inf), "x", None, (24.0, 24.0, 24.0), YES),  # "over 6x"
        (None, "", None, (1.0, 1.0, 1.0), YES),
        (None, "", None, (0.0, 0.0, 0.0), NO),
        (10.0, "count", None, (math.nan, math.nan, math.nan), NO),
    ],
)
def test_the_rule_on_its_boundaries(value, unit, null, est, verdict):
    assert judge(value, unit, null, *est) == verdict
    assert rule_by_hand(value, unit, null, *est) == verdict


def _claim(outcome: Outcome, **kw) -> Claim:
    base = dict(
        key="k", section="workload", said="something", value=10.0, unit="count",
        source="somewhere", measure=lambda _: outcome, note="the claim's note",
    )  # fmt: skip
    return Claim(**{**base, **kw})


@pytest.mark.parametrize(
    ("values", "verdict"),
    [
        ((Est(10.5),), YES),
        ((Est(10.5), Est(9.5)), YES),
        ((Est(10.5), Est(15.0)), DIRECTION),  # the worst value decides
        ((Est(14.0, 11.0, 17.0),), YES),  # the interval overlaps, the point does not
        ((Est(25.0),), NO),
        ((Est(10.5), Est(25.0)), NO),
        ((Est(None),), NO),
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
    if values:
        assert_rows_follow_the_rule([row])


def test_not_run_absent_and_a_note_that_depends_on_the_outcome():
    missing = evaluate(_claim(Missing("paper-pool8")), Inputs({}))
    assert missing is not None
    assert (missing.ours, missing.verdict, missing.note) == ("-", NOT_RUN, "run paper-pool8")
    other = evaluate(_claim(Missing("no experiment measures this")), Inputs({}))
    assert other is not None and other.note == "no experiment measures this"
    for printed in ("-", "", "nanx (-)"):
        row = evaluate(_claim(Measured(printed, (Est(10.0),))), Inputs({}))
        assert row is not None
        assert (row.verdict, row.note) == (NOT_RUN, "no runs for this point")
    assert evaluate(_claim(None), Inputs({})) is None
    row = evaluate(_claim(Measured("x", (Est(10.0),), note="because")), Inputs({}))
    assert row is not None and row.note == "because"


def test_the_claims_table_is_consistent():
    keys = [c.key for c in CLAIMS]
    assert len(keys) == len(set(keys))
    sections = {s for s, _ in SECTIONS}
    for c in CLAIMS:
        assert c.section in sections, c.key
        assert c.source.startswith("study"), c.key
        assert isinstance(c.role, Role)
    # the inputs are what the workload and presets were set to; predictions are ours vs ours
    inputs = {c.key for c in CLAIMS if c.role is Role.INPUT}
    assert {"calls", "prompt_tokens", "reuse", "working_set", "pressure_5", "cpb_h20"} <= inputs
    assert {c.key for c in CLAIMS if c.role is Role.SELF} == {"pred_prefill_20", "pred_restores_10"}
    with pytest.raises(KeyError):
        claim("no such claim")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("reuse", 0.981),
        ("fixed_prefill_5", -0.36),
        ("fixed_prefill_40", 4.3),
        ("cond_prefill_5", -0.35),
        ("cond_makespan_5", -0.104),
        ("pred_restores_10", (-0.18, -0.11)),
        ("repeat_spread_40", 0.07),
        ("prefix_caching", 11.1),
        ("turn_gap_5", 9.0),
        ("evicted_anyway_5", (0.84, 0.85)),
        ("evicted_anyway_40", 0.048),
        ("offload_rtx-3090", 0.91),
        ("offload_h20", 0.60),
        ("ws_64x64k", 94.5),
        ("load_vs_recompute_h20", (6.0, math.inf)),
    ],
)
def test_published_numbers_as_the_study_gave_them(key, value):
    assert claim(key).value == value
    assert "same workload and host-link costs" not in claim("offload_split").said.lower()


def test_with_nothing_run_only_the_presets_are_judged_and_the_score_counts_outcomes():
    rows = paper_rows({}, facts=None)
    judged = {r.key: r.verdict for r in rows if r.verdict != NOT_RUN}
    # the hardware presets' compute per host-link byte (2,219, 2,312, 15,461 FLOP per byte), the
    # 64 x 64K working set (94.5 GiB) and the H20's load-vs-recompute ratio are arithmetic
    assert judged == {
        "cpb_rtx-3090": YES, "cpb_h20": YES, "cpb_h800": YES, "ws_64x64k": YES,
        "load_vs_recompute_h20": YES,
    }  # fmt: skip
    assert all(r.role == "input" for r in rows if r.key in judged)
    assert_rows_follow_the_rule(rows)
    outcomes = [r for r in rows if r.role == "outcome"]
    assert score_line(rows).startswith(f"**Score (outcomes only, {len(outcomes)} claims):** 0 ")
    notes = {r.key: r.note for r in rows if r.verdict == NOT_RUN}
    assert notes["calls"] == "run paper-h20" and notes["folding_hit"] == "run paper-folding"
    # every claim keeps its row when its experiment did not run: a page regenerated from one
    # experiment's results says which rows are not run instead of dropping them
    assert notes["pressure_5"] == "run paper-h20" and notes["offload_h800"] == "run paper-hardware"
    assert [r.key for r in rows] == [c.key for c in CLAIMS]


def test_one_markdown_table_helper_keeps_cells_in_their_column():
    lines = md_table(["a", "b|c"], [["x|y", "two\nlines"], [1, None]])
    assert lines == ["| a | b\\|c |", "|---|---|", "| x\\|y | two lines |", "| 1 | None |", ""]


def test_the_no_tier_baseline_counts_each_repeat_once():
    """paper-h20's 0 GiB points of the three admissions are the same runs (nothing to admit
    to): the makespan ratio took all of them as its baseline, n = 6 from 2 values, and printed
    an interval about 4.6x too narrow. The baseline is the same admission's."""
    from pathlib import Path

    import numpy as np
    import pandas as pd

    from replay.analysis.compare import welch_compare
    from replay.analysis.load import Results
    from replay.studies.efficientagent.measures import Inputs, makespan_ratio, prefill_change_20
    from replay.studies.efficientagent.runs import PaperRun

    rows = []
    for adm in ("all", "fixed", "conditioned"):
        for tier, spans in ((0, (124.95, 126.0)), (5, (118.1, 119.7)), (20, (110.2, 111.9))):
            for rep, span in enumerate(spans):
                rows.append({
                    "point": f"host_tier_gib={tier},admission={adm}", "repeat": f"r{rep}",
                    "host_tier_gib": tier, "admission": adm, "status": "ok",
                    "makespan_s": span, "computed_prefill_tokens": span * 1e6,
                })  # fmt: skip
    runs = pd.DataFrame(rows)
    h20 = PaperRun(Results(Path("."), "paper-h20", runs, ("host_tier_gib", "admission")))
    got = makespan_ratio(5)(Inputs({"paper-h20": h20})).values[0]
    want = welch_compare(np.array([124.95, 126.0]), np.array([118.1, 119.7]))
    assert (got.low, got.high) == pytest.approx((1 + want.rel_low, 1 + want.rel_high))
    prefill = prefill_change_20(Inputs({"paper-h20": h20})).values[0]
    want = welch_compare(np.array([124.95e6, 126.0e6]), np.array([110.2e6, 111.9e6]))
    assert (prefill.low, prefill.high) == pytest.approx((want.rel_low, want.rel_high))
