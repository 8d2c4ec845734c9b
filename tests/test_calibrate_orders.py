"""`replay calibrate --orders N`: each point is predicted as the mean over N simulated call
orders (the recorded start order without noise, then seeded shuffles with step noise), because a
real engine's repeats each follow the order their own timing picks."""

from __future__ import annotations

import orjson
import pytest

from replay.calibrate.orders import ORDER_JITTER, permuted_trace, simulate_orders
from replay.errors import ConfigError
from replay.trace.synth import synth
from tests.test_calibrate import _calibrated_sweep, _run

FIT = ["--fit", "host_tier_gib=0", "--fit", "host_tier_gib=0.015625"]


def _trace():
    return synth("swe-agent", tasks=6, seed=1, vocab_size=8192, scale=0.06, max_calls_per_task=6)


def test_a_permuted_trace_keeps_every_call_and_shuffles_the_start_order():
    trace = _trace()
    starts = set()
    for seed in range(1, 6):
        shuffled = permuted_trace(trace, seed)
        assert sorted(c.ref for c in shuffled.calls) == sorted(c.ref for c in trace.calls)
        for task, calls in shuffled.tasks.items():  # each task's calls keep their order
            assert [c.index for c in calls] == [c.index for c in trace.tasks[task]]
        assert permuted_trace(trace, seed).root_task_ids == shuffled.root_task_ids  # seeded
        starts.add(tuple(shuffled.root_task_ids))
    assert len(starts) > 1 and sorted(next(iter(starts))) == sorted(trace.root_task_ids)


def test_orders_are_the_recorded_one_then_seeded_shuffles_with_step_noise():
    trace = _trace()
    seen = []

    def simulate(tr, kw):  # what each order is run with; its "totals" tell the orders apart
        seen.append((tuple(tr.root_task_ids), kw.get("jitter"), kw.get("seed")))
        return {"makespan_s": float(len(seen)), "ttft_p50_s": None}

    got = simulate_orders(simulate, trace, {"costs": "c.toml"}, 4, ["makespan_s", "ttft_p50_s"])
    assert seen[0] == (tuple(trace.root_task_ids), None, None)
    assert [s[1:] for s in seen[1:]] == [(ORDER_JITTER, 1), (ORDER_JITTER, 2), (ORDER_JITTER, 3)]
    assert got["makespan_s"] == pytest.approx(2.5) and got["spread"]["makespan_s"] == [1.0, 4.0]
    assert got["ttft_p50_s"] is None and got["orders"] == 4
    with pytest.raises(ConfigError, match="--orders"):
        simulate_orders(simulate, trace, {}, 0, ["makespan_s"])


def test_calibrate_predicts_the_mean_over_orders_and_reports_their_range(
    tmp_path, capsys, monkeypatch
):
    # the "measured" sweep: the simulator with llama.cpp's personality, one seat, the costs
    # known; its held-out points hold part of the working set, where the order decides reuse
    _calibrated_sweep(tmp_path, capsys, monkeypatch)
    base = ["calibrate", "results/calib", *FIT, "-o", "fitted.toml", "--json"]
    code, out, err = _run(base, capsys)
    assert code == 0, err
    one = orjson.loads(out)
    code, out, err = _run([*base, "--orders", "4"], capsys)
    assert code == 0, err
    four = orjson.loads(out)
    assert (one["orders"], four["orders"]) == (1, 4)
    moved = 0
    for row1, row4 in zip(one["fit"] + one["heldout"], four["fit"] + four["heldout"], strict=True):
        for key in ("makespan_s", "computed_prefill_tokens"):
            lo, hi = row4["simulated_range"][key]
            assert lo <= row4["simulated"][key] <= hi
            # the recorded order without noise is one of the four
            assert lo <= row1["simulated"][key] <= hi
            assert row1["simulated_range"][key] == [row1["simulated"][key]] * 2
            moved += hi > lo
    assert moved > 0  # other start orders and step noise give other totals
    code, out, _ = _run([*base[:-1], "--orders", "2"], capsys)
    assert code == 0 and "over 2 simulated call orders" in out and "prefill" in out


@pytest.mark.parametrize("orders", ["0", "65"])
def test_a_bad_orders_count_is_one_line_and_exit_2(orders, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = _run(["calibrate", "nowhere", *FIT, "-o", "c.toml", "--orders", orders], capsys)
    assert code == 2 and "--orders" in err and len(err.strip().splitlines()) == 1, err
