"""The embedded default experiment (`make run`): experiments/quick.toml on the in-process
simulator, end to end, into a temporary results folder."""

from __future__ import annotations

import subprocess
import sys
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


def test_one_simulator_run_loads_no_http_client_or_pandas(tmp_path):
    """What a Ray worker does for a run, in a fresh interpreter: `run_one` of a simulator point
    imports neither httpx (launched servers only) nor pandas (the head's summary), so a worker's
    first run does not pay for them."""
    code = (
        "import sys; from pathlib import Path\n"
        "from replay.sweep.config import load_experiment\n"
        "from replay.sweep.plan import plan_runs\n"
        "from replay.sweep.prepare import load_trace\n"
        "from replay.sweep.runner import SweepRunner\n"
        f"exp = load_experiment({str(ROOT / 'experiments' / 'quick.toml')!r})\n"
        f"r = SweepRunner(exp, force=True, results_root={str(tmp_path)!r}, echo=lambda s: None)\n"
        "r.trace = load_trace(exp)\n"
        "print(r.run_one(plan_runs(exp)[0]).status)\n"
        "print(sorted(m for m in ('httpx', 'pandas') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["ok", "[]"], done.stdout
