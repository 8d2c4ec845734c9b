"""Predictions joined with measurements: tolerant reading, matching and relative errors."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from replay.analysis.aggregate import aggregate
from replay.analysis.predictions import (
    agrees,
    compare_predictions,
    prediction_groups,
    prediction_table,
    relative_error,
    skipped_predictions,
    working_set_by_run,
)

PRED = {
    "working_set_gib": 11.4,
    "tiers": [
        {"host_tier_gib": 5, "computed_prefill_tokens": 1000, "host_restore_tokens": 100},
        {"host_tier_gib": 20, "computed_prefill_tokens": 200, "host_restore_tokens": 900},
    ],
}


def test_relative_error_formula():
    assert relative_error(110, 100) == pytest.approx(0.1)
    assert relative_error(90, 100) == pytest.approx(-0.1)
    assert math.isnan(relative_error(5, 0))


@pytest.mark.parametrize(
    "doc,params",
    [
        (PRED, {}),
        (
            {
                "groups": [
                    {"key": "pool=16,admission=all", "inputs": {"pool": 16}, "prediction": PRED}
                ]
            },
            {"pool": 16, "admission": "all"},
        ),
        ({"pool=8": PRED}, {"pool": 8}),
        ([{"params": {"pool": 4}, **PRED}], {"pool": 4}),
    ],
)
def test_every_wrapping_of_a_prediction_is_found(doc, params):
    groups = prediction_groups(doc)
    assert len(groups) == 1
    assert groups[0][0] == params
    assert groups[0][1]["working_set_gib"] == 11.4


def test_skipped_groups_are_reported_not_invented():
    doc = {"groups": [{"key": "admission=fixed", "skipped": "set predict.model"}]}
    assert prediction_table(doc).empty
    assert skipped_predictions(doc) == ["admission=fixed: set predict.model"]


def test_table_has_one_row_per_tier():
    table = prediction_table({"groups": [{"key": "pool=16", "prediction": PRED}]})
    assert list(table["host_tier_gib"]) == [5, 20]
    assert list(table["pool"]) == [16, 16]
    assert list(table["working_set_gib"]) == [11.4, 11.4]


def _measured():
    runs = pd.DataFrame(
        {
            "host_tier_gib": [5, 5, 5, 20.0, 40],
            "pool": [16, 16, 16, 16, 16],
            "computed_prefill_tokens": [1101, 1100, 1102, 250, 180],
            "host_restore_tokens": [80, 90, 100, 900, 950],
        }
    )
    return runs, aggregate(
        runs, ["host_tier_gib", "pool"], ["computed_prefill_tokens", "host_restore_tokens"]
    )


def test_join_by_tier_with_errors_and_interval_check():
    runs, agg = _measured()
    pred = prediction_table({"pool=16": PRED})
    out = compare_predictions(pred, agg, ["host_tier_gib", "pool"])
    by = {(r.host_tier_gib, r.quantity): r for r in out.itertuples()}
    assert set(by) == {
        (5, "computed_prefill_tokens"),
        (5, "host_restore_tokens"),
        (20, "computed_prefill_tokens"),
        (20, "host_restore_tokens"),
    }
    r = by[(5, "computed_prefill_tokens")]
    assert (r.predicted, r.measured, r.n) == (1000, 1101, 3)
    assert r.rel_error == pytest.approx(-101 / 1101)
    assert by[(20, "host_restore_tokens")].rel_error == pytest.approx(0.0)


def test_interval_membership():
    runs, agg = _measured()
    pred = prediction_table({"pool=16": PRED})
    out = compare_predictions(pred, agg, ["host_tier_gib", "pool"]).set_index(
        ["host_tier_gib", "quantity"]
    )
    # computed prefill at 5: mean 1101, s = 1, half = 4.303 / sqrt(3) = 2.48 -> 1000 is outside
    assert bool(out.loc[(5, "computed_prefill_tokens"), "within_interval"]) is False
    # restores at 5: mean 90, s = 10, half = 24.8 -> [65.2, 114.8]; 100 inside
    assert bool(out.loc[(5, "host_restore_tokens"), "within_interval"]) is True
    # one repeat at 20: no interval to be inside of
    assert math.isnan(out.loc[(20, "computed_prefill_tokens"), "within_interval"])


RANGED = {
    "working_set_gib": 11.4,
    "range": {"method": "service_bounds", "derivation": "..."},  # a mapping: not a table column
    "tiers": [
        # measured at 5: mean 1101, 95% interval [1098.5, 1103.5]
        {
            "host_tier_gib": 5,
            "computed_prefill_tokens": 1000,
            "computed_prefill_tokens_low": 990,
            "computed_prefill_tokens_high": 1099,  # reaches into the interval
            "host_restore_tokens": 100,
            "host_restore_tokens_low": 115,  # the point is inside the interval, the range is not
            "host_restore_tokens_high": 130,
        },
        # measured once at 20: 250 computed
        {
            "host_tier_gib": 20,
            "computed_prefill_tokens": 200,
            "computed_prefill_tokens_low": 190,
            "computed_prefill_tokens_high": 260,
            "host_restore_tokens": 900,
        },
    ],
}


def test_a_range_agrees_when_it_overlaps_the_measured_interval():
    _, agg = _measured()
    pred = prediction_table({"pool=16": RANGED})
    assert "range" not in pred.columns
    out = compare_predictions(pred, agg, ["host_tier_gib", "pool"]).set_index(
        ["host_tier_gib", "quantity"]
    )
    cp5 = out.loc[(5, "computed_prefill_tokens")]
    assert (cp5["predicted_low"], cp5["predicted_high"]) == (990, 1099)
    assert bool(cp5["within_interval"]) is True  # the point (1000) alone would be outside
    assert cp5["rel_error"] == pytest.approx(-101 / 1101)  # errors stay the point's
    assert bool(out.loc[(5, "host_restore_tokens"), "within_interval"]) is False
    # one repeat: the range must contain the single measurement
    assert bool(out.loc[(20, "computed_prefill_tokens"), "within_interval"]) is True
    # a quantity without a range keeps the point rule (no interval with one repeat: unknown)
    r20 = out.loc[(20, "host_restore_tokens")]
    assert math.isnan(r20["predicted_low"]) and math.isnan(r20["within_interval"])


def test_agrees_rules():
    nan = math.nan
    # overlap, touching ends included
    assert agrees(5, 4, 6, 10, 6, 14, 3) is True
    assert agrees(5, 4, 5.9, 10, 6, 14, 3) is False
    assert agrees(15, 14.5, 20, 10, 6, 14, 3) is False
    # one repeat: the range must hold the mean
    assert agrees(5, 4, 11, 10, nan, nan, 1) is True
    assert agrees(5, 4, 9, 10, nan, nan, 1) is False
    # no range: the point against the interval, unknown with one repeat
    assert agrees(7, nan, nan, 10, 6, 14, 3) is True
    assert agrees(5, nan, nan, 10, 6, 14, 3) is False
    assert math.isnan(agrees(5, nan, nan, 10, nan, nan, 1))


def test_group_parameters_must_match():
    _, agg = _measured()
    pred = prediction_table({"pool=8": PRED})
    assert compare_predictions(pred, agg, ["host_tier_gib", "pool"]).empty


def test_working_set_attaches_to_runs_of_its_group():
    runs = pd.DataFrame({"host_tier_gib": [5, 5], "pool": [16, 8]})
    pred = prediction_table(
        {
            "groups": [
                {"key": "pool=16", "prediction": PRED},
                {"key": "pool=8", "prediction": {**PRED, "working_set_gib": 5.3}},
            ]
        }
    )
    assert list(working_set_by_run(runs, pred, ["host_tier_gib", "pool"])) == [11.4, 5.3]
