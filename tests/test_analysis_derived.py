"""Derived metrics: each formula on hand values, zero denominators, the relative-makespan baseline."""

from __future__ import annotations

import math
import subprocess
import sys

import pandas as pd
import pytest

from replay.analysis.derived import (
    add_derived,
    computed_prefill_fraction,
    device_hit_fraction,
    evicted_unread_fraction,
    host_hit_fraction,
    pressure_ratio,
    recorded_makespan_s,
    relative_makespan,
    slowdown_vs_recorded,
    write_read_ratio,
)


def test_formulas_on_hand_values():
    assert computed_prefill_fraction(250, 1000) == 0.25
    assert device_hit_fraction(600, 1000) == 0.6
    assert host_hit_fraction(150, 1000) == 0.15
    assert write_read_ratio(650, 100) == 6.5  # the study's 5 GiB write:read
    assert evicted_unread_fraction(792, 1000) == pytest.approx(0.792)
    assert relative_makespan(128.0, 212.0) == pytest.approx(0.6038, abs=1e-4)
    assert slowdown_vs_recorded(300.0, 200.0) == 1.5
    assert pressure_ratio(11.4, 5) == pytest.approx(2.28)


def test_recorded_makespan_spans_first_start_to_last_end():
    recs = [
        {"start_s": 5.0, "end_s": 9.0},
        None,
        {"task_jct_s": 3.0},
        {"start_s": 2.0, "end_s": 7.5},
    ]
    assert recorded_makespan_s(recs) == 7.0
    assert recorded_makespan_s([None, {"start_s": 1.0}]) is None


def test_zero_or_unknown_denominator_is_nan_not_zero():
    assert math.isnan(write_read_ratio(500, 0))
    assert math.isnan(pressure_ratio(11.4, 0))
    assert math.isnan(host_hit_fraction(10, None))


def test_series_in_series_out():
    out = write_read_ratio(pd.Series([6, 1, 3]), pd.Series([2, 0, None]))
    assert isinstance(out, pd.Series)
    assert out.iloc[0] == 3 and math.isnan(out.iloc[1]) and math.isnan(out.iloc[2])


def test_add_derived_adds_columns_whose_inputs_exist():
    runs = pd.DataFrame(
        {
            "status": ["ok"] * 5,
            "host_tier_gib": [0, 0, 5, 5, 20],
            "admission": ["all", "all", "all", "conditioned", "conditioned"],
            "makespan_s": [100.0, 110.0, 84.0, 63.0, 52.5],
            "prompt_tokens": [1000] * 5,
            "computed_prefill_tokens": [1000, 1000, 500, 300, 100],
            "host_restore_tokens": [0, 0, 400, 500, 700],
            "host_write_tokens": [0, 0, 2000, 600, 700],
        }
    )
    out = add_derived(runs, ["host_tier_gib", "admission"])
    assert "device_hit_fraction" not in out  # no device_hit_tokens column
    assert list(out["computed_prefill_fraction"]) == [1.0, 1.0, 0.5, 0.3, 0.1]
    assert out["write_read_ratio"].iloc[2] == 5.0
    # Baseline: 0 GiB (mean 105 s), which ran only with admission=all, so it serves both policies.
    assert list(out["relative_makespan"]) == pytest.approx([100 / 105, 110 / 105, 0.8, 0.6, 0.5])
    assert "relative_makespan" not in runs  # input untouched


def test_failed_baseline_runs_do_not_count():
    runs = pd.DataFrame(
        {
            "status": ["ok", "failed", "ok"],
            "host_tier_gib": [0, 0, 5],
            "makespan_s": [100.0, 3.0, 50.0],
        }
    )
    out = add_derived(runs, ["host_tier_gib"])
    assert out["relative_makespan"].iloc[2] == 0.5


def test_analysis_core_stays_pure():
    code = (
        "import sys, replay.analysis, replay.analysis.words;"
        "print(sorted(m for m in ('matplotlib', 'httpx', 'aiohttp') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"
