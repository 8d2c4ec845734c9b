"""`make gpu-check` (scripts/gpu_check.py): it stops at once and says why on a machine without a
GPU, and its run checks hold on a real sweep of the simulator's server over loopback (the GPU
engines themselves only run on a GPU machine)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from replay.sweep.config import load_experiment
from replay.sweep.runner import run_sweep
from tests.subprocess_helpers import load_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.py"

SIM = """
name = "gc"
repeats = 1
[trace]
synth = { preset = "swe-agent", tasks = 4, seed = 1, max_calls_per_task = 10, max_prompt_tokens = 20000 }
[run]
pool = 4
gap_scale = 0.0
[engine]
kind = "sim-server"
tp = 8
device_kv_gib = 0.5
time_scale = 0.0
max_num_seqs = 1                        # one running request: no preemption
[matrix]
host_tier_gib = [2]
[timeouts]
ready_s = 60
stop_grace_s = 5
"""


def test_without_a_gpu_it_stops_at_once_saying_why(tmp_path):
    if load_script(SCRIPT, "gpu_check").visible_gpu_count({}) > 0:
        pytest.skip("this machine has a GPU")
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--work", str(tmp_path)], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert time.monotonic() - start < 20
    assert done.stderr.count("\n") == 1 and "needs an NVIDIA GPU" in done.stderr
    assert list(tmp_path.iterdir()) == []  # nothing built, nothing launched


def test_run_checks_pass_on_a_real_run_and_catch_each_fault(tmp_path):
    gpu_check = load_script(SCRIPT, "gpu_check")
    (tmp_path / "gc.toml").write_text(SIM)
    result = run_sweep(
        load_experiment(tmp_path / "gc.toml"), results_root=tmp_path / "r", echo=lambda s: None
    )
    assert [o.status for o in result.outcomes] == ["ok"]
    run = tmp_path / "r" / "gc" / "host_tier_gib=2" / "r0"
    counters = json.loads((run / "counters.json").read_text())
    assert counters["host_restore_tokens"] > 0  # the small device tier sends contexts to host
    assert gpu_check.verify_run(run, tier_on=True, exact=False) == []
    # The simulator's server returns the forced ids: exact forcing checks out, and a call whose
    # output differs is reported.
    assert gpu_check.verify_run(run, tier_on=True, exact=True) == []
    calls = (run / "calls.jsonl").read_text().splitlines()
    first = json.loads(calls[0]) | {"exact_match": 0.5}
    (run / "calls.jsonl").write_text("\n".join([json.dumps(first), *calls[1:]]) + "\n")
    assert "1 of " in gpu_check.verify_run(run, tier_on=True, exact=True)[0]
    assert "not forced exactly" in gpu_check.verify_run(run, tier_on=True, exact=True)[0]
    counters["device_hit_tokens"] += 1
    (run / "counters.json").write_text(json.dumps(counters))
    assert "cached tokens per call" in gpu_check.verify_run(run, tier_on=True, exact=False)[0]
    counters["device_hit_tokens"] -= 1
    counters["device_hit_tokens"] += counters["host_restore_tokens"]
    counters["host_restore_tokens"] = 0
    (run / "counters.json").write_text(json.dumps(counters))
    assert gpu_check.verify_run(run, tier_on=True, exact=False) == [
        "host tier on but host restores = 0"
    ]
    counters["preemptions"] = 2  # re-prefills: the sums no longer compare, and it says so
    (run / "counters.json").write_text(json.dumps(counters))
    assert "2 preemptions" in gpu_check.verify_run(run, tier_on=False, exact=False)[0]
