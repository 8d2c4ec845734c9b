"""Repeat statistics checked against hand-computed values (t-table constants, not scipy)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from replay.analysis.aggregate import aggregate, describe, point_table

# Student's t, two-sided 95%, from the printed table.
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776}


def test_three_repeats_match_hand_computation():
    s = describe([10.0, 12.0, 14.0])
    assert s.n == 3
    assert s.mean == 12.0
    assert s.std == pytest.approx(2.0)  # sqrt(((-2)^2 + 0 + 2^2) / 2)
    assert (s.min, s.max) == (10.0, 14.0)
    half = T975[2] * 2.0 / math.sqrt(3)  # 4.968
    assert s.half_width == pytest.approx(half, rel=1e-3)
    assert s.ci_low == pytest.approx(12.0 - half, rel=1e-3)
    assert s.ci_high == pytest.approx(12.0 + half, rel=1e-3)
    assert s.cv == pytest.approx(2.0 / 12.0)


def test_two_repeats_use_one_degree_of_freedom():
    s = describe([60.0, 62.0])
    # std = sqrt(2), half = 12.706 * sqrt(2) / sqrt(2)
    assert s.half_width == pytest.approx(T975[1], rel=1e-3)


def test_single_repeat_has_mean_but_no_interval():
    s = describe([5.0])
    assert s.n == 1 and s.mean == 5.0 and s.min == s.max == 5.0
    assert (
        math.isnan(s.std) and math.isnan(s.ci_low) and math.isnan(s.half_width) and math.isnan(s.cv)
    )


def test_unknown_values_are_not_measurements():
    s = describe([None, float("nan"), 4.0, 6.0])
    assert s.n == 2 and s.mean == 5.0
    empty = describe([None, None])
    assert empty.n == 0 and math.isnan(empty.mean)


def test_zero_mean_has_no_cv():
    s = describe([-1.0, 1.0])
    assert s.mean == 0 and math.isnan(s.cv)


@given(
    st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=2, max_size=12),
    st.floats(-1e6, 1e6, allow_nan=False),
)
def test_shift_moves_mean_and_interval_not_spread(values, shift):
    a, b = describe(values), describe([v + shift for v in values])
    assert b.mean == pytest.approx(a.mean + shift, abs=1e-6)
    assert b.std == pytest.approx(a.std, abs=1e-6, rel=1e-6)
    assert b.half_width == pytest.approx(a.half_width, abs=1e-5, rel=1e-6)
    assert a.min <= a.mean + 1e-6 and a.mean <= a.max + 1e-6
    assert a.ci_low <= a.mean + 1e-9 <= a.ci_high + 2e-9


def _runs():
    return pd.DataFrame(
        {
            "host_tier_gib": [5, 5, 5, 20, 20],
            "admission": ["all"] * 5,
            "makespan_s": [10.0, 12.0, 14.0, 7.0, None],
            "computed_prefill_tokens": [100, 100, 100, 40, 50],
        }
    )


def test_aggregate_groups_points_and_counts_non_null_values():
    agg = aggregate(
        _runs(), ["host_tier_gib", "admission"], ["makespan_s", "computed_prefill_tokens", "absent"]
    )
    assert set(agg["metric"]) == {"makespan_s", "computed_prefill_tokens"}
    m5 = agg[(agg.host_tier_gib == 5) & (agg.metric == "makespan_s")].iloc[0]
    assert (m5["n"], m5["mean"]) == (3, 12.0)
    assert m5["half_width"] == pytest.approx(T975[2] * 2 / math.sqrt(3), rel=1e-3)
    m20 = agg[(agg.host_tier_gib == 20) & (agg.metric == "makespan_s")].iloc[0]
    assert m20["n"] == 1 and m20["mean"] == 7.0 and math.isnan(m20["half_width"])
    p20 = agg[(agg.host_tier_gib == 20) & (agg.metric == "computed_prefill_tokens")].iloc[0]
    assert (p20["n"], p20["mean"], p20["std"]) == (2, 45.0, pytest.approx(math.sqrt(50)))


def test_point_table_is_one_row_per_point():
    agg = aggregate(
        _runs(), ["host_tier_gib", "admission"], ["makespan_s", "computed_prefill_tokens"]
    )
    wide = point_table(agg, ["host_tier_gib", "admission"])
    assert list(wide["host_tier_gib"]) == [5, 20]
    assert list(wide["makespan_s"]) == [12.0, 7.0]
    assert list(wide["computed_prefill_tokens"]) == [100.0, 45.0]


def test_aggregate_of_nothing_is_empty():
    assert aggregate(_runs().iloc[0:0], ["host_tier_gib"], ["makespan_s"]).empty
