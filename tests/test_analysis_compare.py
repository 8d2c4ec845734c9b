"""Verdict logic on constructed repeats: a real difference, a noise-only one, single repeats."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats as sps

from replay.analysis.compare import (
    NO_DATA,
    REAL,
    SINGLE_REPEAT,
    WITHIN_NOISE,
    all_comparisons,
    compare_levels,
    default_baselines,
    welch_compare,
)


def test_clear_difference_is_real_and_matches_hand_welch():
    a, b = [100.0, 101.0, 99.0], [80.0, 80.5, 79.5]
    c = welch_compare(a, b)
    assert c.verdict == REAL
    assert c.diff == pytest.approx(-20.0)
    assert c.rel_diff == pytest.approx(-0.2)
    # Hand: s_a^2 = 1, s_b^2 = 0.25, se = sqrt(1/3 + 0.25/3) = 0.6455;
    # Welch-Satterthwaite dof = 0.41667^2 / ((1/3)^2/2 + (0.25/3)^2/2) = 2.941.
    se = math.sqrt(1 / 3 + 0.25 / 3)
    dof = (1 / 3 + 0.25 / 3) ** 2 / ((1 / 3) ** 2 / 2 + (0.25 / 3) ** 2 / 2)
    assert dof == pytest.approx(2.941, abs=1e-3)
    assert (c.diff_high - c.diff_low) / 2 == pytest.approx(sps.t.ppf(0.975, dof) * se)
    assert c.p_value == pytest.approx(sps.ttest_ind(b, a, equal_var=False).pvalue)
    assert c.diff_low < c.diff < c.diff_high < 0


def test_overlapping_repeats_are_within_noise():
    c = welch_compare([60.0, 62.0, 58.0], [61.0, 59.0, 60.5])
    assert c.verdict == WITHIN_NOISE
    assert c.diff_low < 0 < c.diff_high
    assert c.p_value == pytest.approx(
        sps.ttest_ind([61.0, 59.0, 60.5], [60.0, 62.0, 58.0], equal_var=False).pvalue
    )


def test_single_repeat_is_never_called_real():
    c = welch_compare([100.0], [1.0, 1.1, 0.9])
    assert c.verdict == SINGLE_REPEAT
    assert c.diff == pytest.approx(-99.0)
    assert math.isnan(c.diff_low) and math.isnan(c.p_value)


def test_identical_repeats_have_no_noise():
    assert welch_compare([5.0, 5.0], [7.0, 7.0]).verdict == REAL
    same = welch_compare([5.0, 5.0, 5.0], [5.0, 5.0])
    assert same.verdict == WITHIN_NOISE and same.p_value == 1.0


def test_missing_side_has_no_data():
    c = welch_compare([], [1.0, 2.0])
    assert c.verdict == NO_DATA and c.n_a == 0 and c.n_b == 2


@given(
    st.lists(st.floats(1, 1000), min_size=2, max_size=6),
    st.lists(st.floats(1, 1000), min_size=2, max_size=6),
)
def test_swapping_sides_flips_the_difference_not_the_verdict(a, b):
    ab, ba = welch_compare(a, b), welch_compare(b, a)
    assert ab.verdict == ba.verdict
    assert ab.diff == pytest.approx(-ba.diff, abs=1e-9)
    if not math.isnan(ab.p_value):
        assert ab.p_value == pytest.approx(ba.p_value)


def _runs() -> pd.DataFrame:
    rows = []
    data = {
        (0, "all"): [100.0, 101.0, 99.0],
        (5, "all"): [90.0, 91.0, 89.0],
        (5, "conditioned"): [80.0, 80.5, 79.5],
        (20, "all"): [60.0, 62.0, 58.0],
        (20, "conditioned"): [61.0, 59.0, 60.5],
        (40, "all"): [50.0],
        (40, "conditioned"): [45.0],
    }
    for (tier, adm), values in data.items():
        rows += [{"host_tier_gib": tier, "admission": adm, "makespan_s": v} for v in values]
    return pd.DataFrame(rows)


def test_levels_compared_at_each_other_setting():
    out = compare_levels(
        _runs(), ["host_tier_gib", "admission"], "admission", "all", ["makespan_s"]
    )
    verdicts = {row.host_tier_gib: row.verdict for row in out.itertuples()}
    # No conditioned run at 0 GiB: nothing to compare there.
    assert verdicts == {5: REAL, 20: WITHIN_NOISE, 40: SINGLE_REPEAT}
    assert set(out["method"]) == {"Welch's t-test"}


def test_no_offload_baseline_serves_every_policy():
    # 0 GiB ran only with admission=all; it is still the baseline for conditioned.
    out = compare_levels(
        _runs(), ["host_tier_gib", "admission"], "host_tier_gib", 0, ["makespan_s"]
    )
    cond5 = out[(out.admission == "conditioned") & (out.level == 5)].iloc[0]
    assert cond5["mean_a"] == pytest.approx(100.0) and cond5["mean_b"] == pytest.approx(80.0)
    assert cond5["verdict"] == REAL


def test_default_baselines_prefer_no_offload_and_plain_admission():
    runs = _runs()
    assert default_baselines(runs, ["host_tier_gib", "admission"]) == {
        "host_tier_gib": 0,
        "admission": "all",
    }
    table = all_comparisons(runs, ["host_tier_gib", "admission"], ["makespan_s"])
    assert set(table["factor"]) == {"host_tier_gib", "admission"}
