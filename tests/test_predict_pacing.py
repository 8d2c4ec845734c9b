"""Predictions of the pool order are paced as the run is: its `gap_scale` and `timing` decide
when each call is sent, so the order the tiers see. A sweep whose runs shrank the recorded gaps
(`gap_scale = 0.02` in the vLLM CPU experiments) was predicted at the recorded ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from replay.model.order import closed_loop_schedule
from replay.model.predict import predict_tiers
from replay.sweep.config import load_experiment
from replay.sweep.prepare import load_trace, write_predictions
from replay.trace.synth import synth

MODEL = dict(bytes_per_token=1024, chunk_tokens=16, device_tokens=1000, tiers_gib=[0, 0.0005])


def _counters(doc: dict) -> list[tuple[int, int]]:
    return [(t["computed_prefill_tokens"], t["host_restore_tokens"]) for t in doc["tiers"]]


@pytest.mark.parametrize("timing", ["think", "original"])
def test_pool_order_is_the_runs_closed_loop_at_its_gap_scale(timing):
    trace = synth("swe-agent", tasks=4, seed=1, scale=0.05, max_calls_per_task=6)
    at = {g: predict_tiers(trace, pool=2, gap_scale=g, timing=timing, **MODEL) for g in (0.0, 1.0)}
    assert _counters(at[0.0]) != _counters(at[1.0])  # the order changed what the tiers hold
    for g, doc in at.items():
        given = closed_loop_schedule(trace, 2, gap_scale=g, timing=timing)
        assert _counters(doc) == _counters(predict_tiers(trace, pool=2, order=given, **MODEL))
        assert (doc["gap_scale"], doc["timing"]) == (g, timing)


EXPERIMENT = """\
name = "paced"
[trace]
synth = { preset = "swe-agent", tasks = 4, seed = 1, scale = 0.05, max_calls_per_task = 6 }
[run]
pool = 2
gap_scale = GAP
[engine]
kind = "sim"
model = "qwen3-coder-30b-a3b"
hardware = "h20"
tp = 8
device_kv_gib = 0.005
[matrix]
host_tier_gib = [0, 0.2]
"""


def test_sweep_predicts_with_its_runs_gap_scale(tmp_path: Path):
    groups = {}
    for gap in ("0", "1"):
        path = tmp_path / f"gap{gap}.toml"
        path.write_text(EXPERIMENT.replace("GAP", gap))
        exp = load_experiment(path)
        doc = write_predictions(load_trace(exp), exp, tmp_path / gap, force=False)
        assert doc is not None
        (groups[gap],) = doc["groups"]
    for gap, group in groups.items():
        assert group["inputs"]["gap_scale"] == float(gap) == group["prediction"]["gap_scale"]
    assert _counters(groups["0"]["prediction"]) != _counters(groups["1"]["prediction"])
