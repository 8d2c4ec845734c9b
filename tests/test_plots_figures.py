"""Each figure holds the expected series: read back from the matplotlib artists, not the files."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PolyCollection
from matplotlib.container import BarContainer, ErrorbarContainer

from replay.analysis.aggregate import aggregate
from replay.analysis.derived import add_derived
from replay.analysis.predictions import prediction_table
from replay.plots import (
    FigureContext,
    engine_comparison,
    hits_vs_pressure,
    makespan_vs_tier,
    prefill_vs_tier,
    restores_writes_vs_tier,
    save_figure,
    slot_timeline,
    ttft_cdf,
    ttft_s,
)

CTX = FigureContext("tiny", "2026-12-01")
PARAMS = ["host_tier_gib", "admission"]


def _runs() -> pd.DataFrame:
    rows = []
    spec = {
        (0, "all"): ([100.0, 102.0, 98.0], 1000, 0, 0),
        (5, "all"): ([90.0, 92.0, 88.0], 700, 150, 900),
        (5, "conditioned"): ([80.0, 81.0, 79.0], 450, 270, 500),
        (20, "all"): ([60.0], 100, 450, 500),
    }
    for (tier, adm), (makespans, prefill, restore, write) in spec.items():
        for m in makespans:
            rows.append(
                {
                    "status": "ok",
                    "host_tier_gib": tier,
                    "admission": adm,
                    "makespan_s": m,
                    "prompt_tokens": 1000,
                    "computed_prefill_tokens": prefill,
                    "host_restore_tokens": restore,
                    "host_write_tokens": write,
                    "device_hit_tokens": 1000 - prefill - restore,
                    "ttft_p50_s": 0.1,
                    "pressure_ratio": 10.0 / tier if tier else math.nan,
                }
            )
    return add_derived(pd.DataFrame(rows), PARAMS)


def _agg():
    runs = _runs()
    metrics = [c for c in runs.columns if c not in (*PARAMS, "status")]
    return aggregate(runs, PARAMS, metrics)


def _errorbars(ax) -> dict[str, ErrorbarContainer]:
    return {c.get_label(): c for c in ax.containers if isinstance(c, ErrorbarContainer)}


def test_footer_names_experiment_and_date():
    fig = makespan_vs_tier(_agg(), PARAMS, CTX)
    texts = [fig._supxlabel.get_text()]
    assert any("tiny" in t and "2026-12-01" in t for t in texts)


def test_makespan_figure_has_one_line_per_policy_with_intervals_and_working_set():
    fig = makespan_vs_tier(_agg(), PARAMS, CTX, working_set_gib=[11.4])
    ax = fig.axes[0]
    bars = _errorbars(ax)
    assert set(bars) == {"admission=all", "admission=conditioned"}
    line = bars["admission=all"].lines[0]
    assert list(line.get_xdata()) == [0, 5, 20]
    assert list(line.get_ydata()) == pytest.approx([100.0, 90.0, 60.0])
    # The interval bar at 0 GiB: 100 ± 4.303 * 2 / sqrt(3) = ± 4.97; the single repeat at 20 has none.
    segs = bars["admission=all"].lines[2][0].get_segments()
    assert segs[0][:, 1] == pytest.approx([100 - 4.968, 100 + 4.968], abs=1e-2)
    assert len(segs[2]) == 0  # no bar: a bar of length 0 drew it as exact, with no noise
    vlines = [ln for ln in ax.get_lines() if ln.get_label() == "working set (predicted)"]
    assert len(vlines) == 1 and list(vlines[0].get_xdata()) == [11.4, 11.4]
    assert "GiB" in ax.get_xlabel() and "(s)" in ax.get_ylabel()


def test_prefill_figure_bars_are_measured_and_line_is_predicted():
    pred = prediction_table(
        {
            "admission=all": {
                "working_set_gib": 10.0,
                "tiers": [
                    {"host_tier_gib": 0, "computed_prefill_tokens": 1000},
                    {"host_tier_gib": 5, "computed_prefill_tokens": 720},
                    {"host_tier_gib": 20, "computed_prefill_tokens": 110},
                ],
            }
        }
    )
    fig = prefill_vs_tier(_agg(), PARAMS, CTX, pred)
    ax = fig.axes[0]
    bars = {c.get_label(): c for c in ax.containers if isinstance(c, BarContainer)}
    assert [p.get_height() for p in bars["measured: admission=all"].patches] == pytest.approx(
        [1000, 700, 100]
    )
    assert [
        p.get_height() for p in bars["measured: admission=conditioned"].patches
    ] == pytest.approx([450])
    (pline,) = [ln for ln in ax.get_lines() if ln.get_label().startswith("predicted")]
    assert list(pline.get_ydata()) == [1000, 720, 110]
    assert list(pline.get_xdata()) == [0, 1, 2]  # category positions of 0, 5, 20 GiB
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "5", "20"]


def test_traffic_figure_has_restores_writes_and_ratio():
    fig = restores_writes_vs_tier(_agg(), PARAMS, CTX)
    left, right = fig.axes[:2]
    series = _errorbars(left)
    assert list(series["writes: admission=all"].lines[0].get_ydata()) == pytest.approx(
        [0, 900, 500]
    )
    assert list(series["restores: admission=conditioned"].lines[0].get_ydata()) == pytest.approx(
        [270]
    )
    ratio = _errorbars(right)["admission=all"].lines[0]
    y = ratio.get_ydata()
    assert math.isnan(y[0]) and list(y[1:]) == pytest.approx([6.0, 500 / 450])  # 0 GiB: no restores


def test_pressure_figure_plots_hits_against_working_set_over_tier():
    fig = hits_vs_pressure(_agg(), PARAMS, CTX)
    ax = fig.axes[0]
    s = _errorbars(ax)
    dev = s["device hits: admission=all"].lines[0]
    assert list(dev.get_xdata()) == pytest.approx([0.5, 2.0])  # 10/20, 10/5; 0 GiB has no ratio
    assert list(dev.get_ydata()) == pytest.approx([0.45, 0.15])
    host = s["host hits: admission=conditioned"].lines[0]
    assert list(host.get_xdata()) == pytest.approx([2.0]) and list(
        host.get_ydata()
    ) == pytest.approx([0.27])
    assert ax.get_xscale() == "log"
    # the ticks read as plain numbers: matplotlib's log labels were mathtext such as 4x10^-1
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels(minor=True) + ax.get_xticklabels()]
    shown = [x for x in labels if x]
    assert "0.5" in shown and "1" in shown and "2" in shown
    assert not any("$" in x or "times" in x for x in shown)


def test_tier_figures_need_a_tier():
    agg = _agg().drop(columns="host_tier_gib")
    assert makespan_vs_tier(agg, ["admission"], CTX) is None
    assert prefill_vs_tier(agg, ["admission"], CTX) is None
    assert hits_vs_pressure(agg, ["admission"], CTX) is None


def _calls():
    return pd.DataFrame(
        {
            "slot": [0, 0, 1],
            "t_ready": [0.0, 2.0, 0.5],
            "t_send": [0.1, 2.0, 0.5],
            "t_first_token": [0.6, 2.3, None],  # slot 1's call failed before its first token
            "t_end": [1.0, 3.0, 1.5],
            "status": ["ok", "ok", "error"],
        }
    )


def test_timeline_splits_each_call_into_its_phases():
    fig = slot_timeline(_calls(), CTX, "p / r0")
    ax = fig.axes[0]
    bars = {}
    for coll in ax.collections:
        assert isinstance(coll, PolyCollection)
        phase, slot = coll.get_gid().split("|")
        xs = [
            (round(p.vertices[:, 0].min(), 6), round(np.ptp(p.vertices[:, 0]), 6))
            for p in coll.get_paths()
        ]
        bars[(phase, int(slot))] = xs
    assert bars[("waiting", 0)] == [(0.0, 0.1)]  # the second call was sent the moment it was ready
    assert bars[("prefill/queue", 0)] == [(0.1, 0.5), (2.0, 0.3)]
    assert bars[("decode", 0)] == [(0.6, 0.4), (2.3, 0.7)]
    assert bars[("prefill/queue", 1)] == [(0.5, 1.0)]
    assert ("decode", 1) not in bars
    assert ax.get_xlabel() == "time since run start (s)"
    # 2 slots x 3.0 s = 6 slot-seconds: waiting 0.1, prefill/queue 0.5 + 0.3 + 1.0, decode 0.4 + 0.7
    assert (
        ax.get_title()
        == "share of slot time: waiting 1.7%, prefill/queue 30.0%, decode 18.3%, gap 50.0%"
    )


def test_ttft_cdf_is_the_sorted_ttfts():
    calls = _calls()
    values = ttft_s(calls)
    assert list(values) == pytest.approx([0.5, 0.3])  # the failed call has none
    fig = ttft_cdf({"host_tier_gib=5": values, "empty": np.array([])}, CTX)
    (line,) = fig.axes[0].get_lines()
    assert line.get_label() == "host_tier_gib=5 (n=2)"
    assert list(line.get_xdata()) == pytest.approx([0.3, 0.3, 0.5])
    assert list(line.get_ydata()) == pytest.approx([0.0, 0.5, 1.0])


def test_many_points_draw_an_even_spread_in_distinct_styles():
    ttfts = {f"host_tier_gib={g}": np.array([0.1 * (g + 1)]) for g in range(50)}
    fig = ttft_cdf(ttfts, CTX)
    lines = fig.axes[0].get_lines()
    labels = [ln.get_label().split(" ")[0] for ln in lines]
    assert len(lines) == 24 and labels[0] == "host_tier_gib=0" and labels[-1] == "host_tier_gib=49"
    assert fig.axes[0].get_title() == "24 of 50 points drawn, evenly spaced in point order"
    styles = {(ln.get_color(), ln.get_linestyle()) for ln in lines}
    assert len(styles) == 24


def test_engine_figure_pairs_engines_at_matched_points():
    runs = pd.DataFrame(
        {
            "host_tier_gib": [5, 5, 5, 5, 10],
            "engine": ["vllm", "vllm", "sglang", "sglang", "vllm"],
            "makespan_s": [10.0, 12.0, 20.0, 22.0, 5.0],
            "computed_prefill_tokens": [1, 1, 2, 2, 3],
        }
    )
    agg = aggregate(runs, ["host_tier_gib", "engine"], ["makespan_s", "computed_prefill_tokens"])
    fig = engine_comparison(agg, ["host_tier_gib", "engine"], CTX)
    ax = fig.axes[0]
    bars = {
        c.get_label(): [p.get_height() for p in c.patches]
        for c in ax.containers
        if isinstance(c, BarContainer)
    }
    assert bars == {"sglang": [21.0], "vllm": [11.0]}  # 10 GiB ran on one engine only: not matched
    assert [t.get_text() for t in ax.get_xticklabels()] == ["host_tier_gib=5"]
    single = aggregate(runs[runs.engine == "vllm"], ["host_tier_gib", "engine"], ["makespan_s"])
    assert engine_comparison(single, ["host_tier_gib", "engine"], CTX) is None


def test_saved_as_png_and_svg(tmp_path):
    fig = makespan_vs_tier(_agg(), PARAMS, CTX)
    paths = save_figure(fig, tmp_path, "fig1")
    assert [p.name for p in paths] == ["fig1.png", "fig1.svg"]
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = paths[1].read_text()
    assert "<svg" in svg and "Makespan vs host tier" in svg
    assert not list(tmp_path.glob(".*.tmp"))


def test_identical_predictions_share_one_line():
    tiers = [
        {"host_tier_gib": t, "computed_prefill_tokens": v}
        for t, v in ((0, 1000), (5, 720), (20, 110))
    ]
    same = prediction_table(
        {"admission=all": {"tiers": tiers}, "admission=conditioned": {"tiers": tiers}}
    )
    ax = prefill_vs_tier(_agg(), PARAMS, CTX, same).axes[0]
    assert [ln.get_label() for ln in ax.get_lines() if ln.get_label().startswith("pred")] == [
        "predicted: all groups"
    ]
    other = [{**t, "computed_prefill_tokens": 5} for t in tiers]
    diff = prediction_table(
        {"admission=all": {"tiers": tiers}, "admission=conditioned": {"tiers": other}}
    )
    ax = prefill_vs_tier(_agg(), PARAMS, CTX, diff).axes[0]
    labels = {
        ln.get_label(): list(ln.get_ydata())
        for ln in ax.get_lines()
        if ln.get_label().startswith("pred")
    }
    assert labels == {
        "predicted: admission=all": [1000, 720, 110],
        "predicted: admission=conditioned": [5, 5, 5],
    }


def test_long_cdf_is_thinned_but_keeps_its_ends():
    values = np.random.default_rng(3).exponential(0.2, size=10_000)
    (line,) = ttft_cdf({"p": values}, CTX).axes[0].get_lines()
    x, y = np.asarray(line.get_xdata()), np.asarray(line.get_ydata())
    assert len(x) <= 2000
    assert (x[0], y[0], y[-1]) == (values.min(), 0.0, 1.0) and x[-1] == values.max()
    assert np.all(np.diff(x) >= 0) and np.all(np.diff(y) > 0)
    # every plotted step is a true point of the empirical CDF: y = rank / n at x
    ranks = np.searchsorted(np.sort(values), x[1:], side="right")
    assert np.allclose(ranks / len(values), y[1:])


def test_a_long_legend_takes_columns_and_the_figure_fits_it(tmp_path):
    import warnings

    from replay.plots.common import legend_outside, new_figure, save_figure

    fig, (ax,) = new_figure(CTX, "forty series")
    width = fig.get_figwidth()
    for i in range(40):
        ax.plot([0, 1], [i, i + 1], label=f"admission=conditioned,pool=16 series {i}")
    legend_outside(ax)
    assert ax.get_legend()._ncols == 3 and fig.get_figwidth() == width + 3.6
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "constrained_layout not applied" when it overflowed
        save_figure(fig, tmp_path, "f", formats=("png",))


def test_prefill_figure_labels_at_most_a_dozen_of_many_tiers():
    """50 tiers: a tick each, a label on every fifth (their labels ran into one smear)."""
    tiers = [round(0.1 * 1.12**i, 3) for i in range(50)]
    runs = add_derived(
        pd.DataFrame(
            [
                {
                    "status": "ok",
                    "host_tier_gib": t,
                    "admission": "all",
                    "makespan_s": 1.0,
                    "prompt_tokens": 1000,
                    "computed_prefill_tokens": 500,
                }
                for t in tiers
            ]  # fmt: skip
        ),
        PARAMS,
    )
    metrics = [c for c in runs.columns if c not in (*PARAMS, "status")]
    ax = prefill_vs_tier(aggregate(runs, PARAMS, metrics), PARAMS, CTX).axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert len(labels) == 50 and [x for x in labels if x] == [f"{t:g}" for t in tiers[::5]]


def test_an_axis_of_single_runs_does_not_claim_an_interval():
    # Figure 1 said "mean ± 95% CI" where every point was one run and no bar was drawn
    assert "mean ± 95% CI" in makespan_vs_tier(_agg(), PARAMS, CTX).axes[0].get_ylabel()
    single = _runs().groupby(PARAMS, as_index=False).head(1)
    metrics = [c for c in single.columns if c not in (*PARAMS, "status")]
    agg = aggregate(single, PARAMS, metrics)
    label = makespan_vs_tier(agg, PARAMS, CTX).axes[0].get_ylabel()
    assert label == "makespan (s), one run a point, no interval"
    right = restores_writes_vs_tier(agg, PARAMS, CTX).axes[1]
    assert [ln.get_label() for ln in right.get_lines() if ln.get_label() == "writes = restores"]
