"""Held-out check of the working-set model (`replay.studies.efficientagent.holdout`): the split, the calibration,
and the check itself on a small workload whose device holds only part of the working set."""

from __future__ import annotations

import subprocess
import sys

import pytest

from replay.studies.efficientagent.holdout import (
    HoldoutSpec,
    calibrate_device_tokens,
    measure,
    run_holdout,
    split_tasks,
)
from replay.trace.synth import synth


def test_split_alternates_root_tasks_and_keeps_subagents_with_their_parent():
    trace = synth("claude-code", tasks=8, seed=2, scale=0.05)
    cal, held = split_tasks(trace)
    assert len(cal) + len(held) == len(trace)
    assert set(cal.tasks).isdisjoint(held.tasks)
    roots = trace.root_task_ids
    assert cal.root_task_ids == roots[0::2] and held.root_task_ids == roots[1::2]
    for half in (cal, held):
        for calls in half.tasks.values():
            parent = calls[0].parent
            if parent is not None:
                assert parent[0] in half.tasks


SMALL = HoldoutSpec(
    tasks=24, scale=0.2, pool=8, other_pool=4, tiers_gib=(0, 0.5, 4), device_kv_gib=0.5
)


def test_calibration_finds_the_device_size_that_matches_the_measurement():
    cal, _ = split_tasks(synth("swe-agent", tasks=SMALL.tasks, seed=0, scale=SMALL.scale))
    measured = measure(cal, SMALL, SMALL.pool, 0)["computed_prefill_tokens"]
    nominal = int(SMALL.device_kv_gib * (1 << 30)) // 24576
    fitted = calibrate_device_tokens(cal, SMALL, SMALL.pool, measured, nominal)
    assert 0 < fitted <= nominal and fitted % SMALL.block_tokens == 0
    from replay.studies.efficientagent.holdout import _predict_no_tier

    # the fitted size reproduces the calibration half's no-tier recompute closely
    assert _predict_no_tier(cal, SMALL, SMALL.pool, fitted) == pytest.approx(measured, rel=0.1)


def test_held_out_prediction_within_ten_percent_far_from_the_transition():
    doc = run_holdout(SMALL)
    held = [r for r in doc["rows"] if r["set"] == "held-out"]
    assert {r["pool"] for r in held} == {SMALL.pool, SMALL.other_pool}
    # far above the working set the model needs no calibration, at either pool
    top = [r for r in held if r["host_tier_gib"] == max(SMALL.tiers_gib)]
    assert len(top) == 2 and all(abs(r["error_raw"]) <= 0.05 for r in top)
    # with no tier, the calibrated device size carries over to the held-out tasks at its pool
    none = [r for r in held if r["host_tier_gib"] == 0 and r["pool"] == SMALL.pool]
    assert len(none) == 1 and abs(none[0]["error"]) <= 0.10
    # calibration is not a no-op: the nominal device overstates what survives on it
    assert doc["device_tokens_fitted"] < doc["device_tokens_nominal"]
    assert "Held out" in doc["summary"]


def test_the_command_runs_under_its_old_name_too():
    # `python -m replay.paper_holdout` was the documented command before the study moved
    for module in ("replay.paper_holdout", "replay.studies.efficientagent.holdout"):
        out = subprocess.run(
            [sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stderr
        assert "--device-kv-gib" in out.stdout


def test_the_default_check_runs_paper_h20s_workload_and_engine(monkeypatch):
    """The spec said "paper-h20's" while it ran 256-token chunks, 4 GiB and non-blocking
    transfers (paper-h20 moved to 1,024, 6 GiB and blocking LMCache transfers); the experiment
    file is the reference, so the two cannot drift apart again."""
    from pathlib import Path

    from replay.sim.options import SimConfig
    from replay.studies.efficientagent.holdout import PAPER_H20_ENGINE
    from replay.sweep.config import load_experiment

    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    exp = load_experiment("experiments/paper-h20.toml")
    spec = HoldoutSpec()
    assert dict(exp.trace.synth) == {"preset": "swe-agent", "tasks": spec.tasks, "seed": spec.seed}
    assert dict(exp.run)["pool"] == spec.pool
    point = next(p for p in exp.points() if dict(p.params)["admission"] == "all")
    _, options, _ = exp.resolve(point)
    paper = SimConfig.from_options(**options)
    ours = SimConfig(
        hardware=spec.hardware, model=spec.model, tp=spec.tp, device_kv_gib=spec.device_kv_gib,
        chunk_tokens=spec.chunk_tokens, block_tokens=spec.block_tokens, **dict(PAPER_H20_ENGINE),
        host_tier_gib=paper.host_tier_gib,
    )  # fmt: skip
    assert ours == paper
    assert sorted(spec.tiers_gib) == sorted({dict(p.params)["host_tier_gib"] for p in exp.points()})
    assert spec.describe().endswith("paper-h20's.")
    assert SMALL.describe().endswith("a reduced setup, not paper-h20's.")


@pytest.mark.parametrize("tasks", ["0", "1"])
def test_a_check_without_two_halves_is_refused_in_one_line(tasks, tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "replay.studies.efficientagent.holdout", "--tasks", tasks,
         "--scale", "0.05", "--out", str(tmp_path / "h")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "tasks" in out.stderr and not (tmp_path / "h" / "holdout.json").exists()
