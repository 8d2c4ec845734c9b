"""The embedded default experiment (`make run`): experiments/quick.toml on the in-process
simulator, end to end, into a temporary results folder."""

from __future__ import annotations

from pathlib import Path

import orjson
import pandas as pd

from replay.sweep.config import load_experiment
from replay.sweep.runner import run_sweep

ROOT = Path(__file__).resolve().parents[1]


def test_quick_experiment_runs_and_the_tier_shows(tmp_path):
    exp = load_experiment(ROOT / "experiments" / "quick.toml")
    tiers = dict(exp.matrix)["host_tier_gib"]
    assert len(tiers) >= 3 and exp.repeats >= 2 and exp.engine == "sim"
    result = run_sweep(exp, results_root=tmp_path, echo=lambda s: None)
    assert not result.interrupted
    assert [o.status for o in result.outcomes] == ["ok"] * (len(tiers) * exp.repeats)
    df = pd.read_parquet(tmp_path / "quick" / "summary.parquet")
    assert len(df) == len(tiers) * exp.repeats
    by_tier = df.groupby("host_tier_gib").mean(numeric_only=True)
    # no host tier: nothing restored or written; the largest tier restores and saves prefill
    assert by_tier.loc[0, "host_restore_tokens"] == 0 and by_tier.loc[0, "host_write_tokens"] == 0
    top = max(tiers)
    assert by_tier.loc[top, "host_restore_tokens"] > 0
    assert by_tier.loc[top, "computed_prefill_tokens"] < by_tier.loc[0, "computed_prefill_tokens"]
    # every run carries the sweep's facts next to the driver's
    doc = orjson.loads((result.exp_dir / result.outcomes[0].rel_dir / "run.json").read_bytes())
    assert (
        doc["experiment"] == "quick"
        and doc["engine"] == "sim"
        and "sim_config" in doc["provenance"]
    )
    preds = orjson.loads((result.exp_dir / "predictions.json").read_bytes())
    assert preds["groups"] and "prediction" in preds["groups"][0]
