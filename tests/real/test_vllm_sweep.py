"""`replay sweep experiments/vllm-cpu.toml`: three device KV sizes on the real vLLM (CPU mode).

The device hit fraction must fall as the cache shrinks below the pool's working set, and each
point must agree with the LRU stack-depth model of the device tier (128-token blocks) run on the
order the engine saw the calls, within HIT_FRACTION_TOLERANCE.

The model's capacity is the blocks that can hold cached KV while a request runs: the pool's blocks
less vLLM's null block, less the running request's unfinished last block (only full blocks enter
the prefix cache, and the experiment runs one request at a time, `max_num_seqs = 1`). With that
capacity the model reproduced every call's cached_tokens exactly on this machine (docs/vllm-cpu.md).
The tolerance, 0.02 of the prompt tokens (about 5 blocks over the run), leaves room for what can
still differ without the model being wrong: calls sent within the same millisecond that the engine
took in the other order, and a context ending exactly on a block boundary. The effect tested, the
fall from the largest to the smallest cache, is about 0.4.
"""

from __future__ import annotations

import subprocess
import sys

import orjson
import pandas as pd
import pytest

from replay.model.predict import predict_tiers
from replay.model.run_order import read_run_order
from replay.sweep.config import load_experiment
from replay.sweep.prepare import load_trace
from tests.real.conftest import BLOCK_TOKENS, KV_BYTES_PER_TOKEN, MODEL_DIR, REPO, usable_blocks

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]  # three server start-ups

EXPERIMENT = REPO / "experiments" / "vllm-cpu.toml"
HIT_FRACTION_TOLERANCE = 0.02


def cache_blocks_while_running(kv_cache_memory_bytes: int) -> int:
    """Blocks free to hold cached prefixes while one request runs (see the module docstring)."""
    return usable_blocks(kv_cache_memory_bytes) - 1


def test_device_capacity_sweep_hits_fall_with_the_cache_as_the_model_predicts(tiny_model, tmp_path):
    assert tiny_model == REPO / ".cache" / "tinyllama" == MODEL_DIR  # the path the TOML names
    results = tmp_path / "results"
    argv = ["sweep", str(EXPERIMENT), "--results", str(results)]
    proc = subprocess.run(
        [sys.executable, "-m", "replay.cli.main", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]

    exp = load_experiment(EXPERIMENT)
    trace = load_trace(exp)
    pool = int(dict(exp.run)["pool"])
    summary = pd.read_parquet(results / exp.name / "summary.parquet")
    assert len(summary) == 3 and (summary["status"] == "ok").all()
    assert (summary["exact_match_rate"] == 1.0).all()
    assert (summary["prompt_mismatches"] == 0).all()
    assert (summary["completion_mismatches"] == 0).all()
    assert (summary["prompt_tokens"] == trace.prompt_tokens).all()

    measured: dict[int, float] = {}
    predicted: dict[int, float] = {}
    for row in summary.itertuples():
        kv_bytes = int(row.kv_cache_memory_bytes)
        run_dir = results / exp.name / row.point / f"r{row.repeat}"
        calls = pd.read_parquet(run_dir / "calls.parquet")
        counters = orjson.loads((run_dir / "counters.json").read_bytes())
        # the server's hit counter and the per-call cached_tokens agree at every size
        assert counters["device_hit_tokens"] == int(calls["cached_tokens"].sum())
        measured[kv_bytes] = counters["device_hit_tokens"] / trace.prompt_tokens
        prediction = predict_tiers(
            trace,
            pool=pool,
            bytes_per_token=KV_BYTES_PER_TOKEN,
            chunk_tokens=BLOCK_TOKENS,
            device_tokens=cache_blocks_while_running(kv_bytes) * BLOCK_TOKENS,
            tiers_gib=[0],
            order=read_run_order(run_dir),  # one call after another, as the engine ran them
            block_tokens=BLOCK_TOKENS,
            offload_pays=False,
        )
        predicted[kv_bytes] = prediction["device_hit_tokens"] / trace.prompt_tokens

    sizes = sorted(measured)
    print("kv bytes, measured, predicted device hit fraction:")
    for s in sizes:
        print(f"  {s}: {measured[s]:.4f} {predicted[s]:.4f}")
    # the hit fraction falls as the working set outgrows the cache... (not always strictly at
    # the middle size: the three agents' calls reach the engine in the order timing gives, and
    # for some orders 3 MiB already holds what 8 MiB does; a CI run measured 0.7628 at both,
    # the model predicting the same for that order)
    assert measured[sizes[0]] <= measured[sizes[1]] <= measured[sizes[2]]
    assert measured[sizes[2]] - measured[sizes[0]] > 10 * HIT_FRACTION_TOLERANCE
    # ...and each point agrees with the stack-depth model of the device tier
    for s in sizes:
        assert abs(measured[s] - predicted[s]) <= HIT_FRACTION_TOLERANCE, (s, measured, predicted)
