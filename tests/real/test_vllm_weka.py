"""Real WEKA Claude Code traces on the real vLLM (CPU), scaled to the tiny model with their prefix
reuse intact (`replay trace scale --tokens 1/64`, docs/trace.md), at two KV cache sizes.

The trace (.cache/traces/weka-pair-k64.jsonl.gz, made by `make weka-traces`) is two conversations: trace_0291, whose parent spawns
two sub-agents that run side by side and join back, and trace_0485. They run on a pool of two
with one request in flight and no think time, so the engine sees the calls in an order fixed
before the run (tests/real/sequential_order.py), and the LRU stack-depth model of the device tier
predicts each size's hit fraction before the server sees a call. Capacity as in
test_vllm_sweep.py: the pool's blocks less the null block, less the running request's last one.

Checked at each size: every output forced exactly, every length as recorded; the sum of per-call
`cached_tokens` equals the server's prefix-hit counter delta; the device hit fraction is within
0.03 of the prediction (about 11 of the run's 360 blocks of prompt). The two sizes are chosen so
the predictions differ by 0.16: the small cache cannot hold both conversations' contexts.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from replay.model.predict import predict_tiers
from replay.model.run_order import read_run_order
from replay.trace.io import read_trace
from tests.real.conftest import (
    BLOCK_TOKENS,
    KV_BYTES_PER_TOKEN,
    REPO,
    SHARED_KV_BYTES,
    cpu_engine_options,
    running_vllm,
)
from tests.real.sequential_order import one_in_flight_order
from tests.real.test_vllm_replay import _replay_with_counters
from tests.real.test_vllm_sweep import cache_blocks_while_running

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

WEKA_PAIR = REPO / ".cache" / "traces" / "weka-pair-k64.jsonl.gz"  # make weka-traces
POOL = 2
SMALL_KV_BYTES = 2 << 20  # 16 blocks, 15 usable: one 1920-token context (the longest is 1,580)
SMALL_MAX_MODEL_LEN = 1920
TOLERANCE = 0.03


def predicted_hit_fraction(kv_cache_memory_bytes: int) -> float:
    """Device hit tokens / prompt tokens by the stack-depth model, from the trace alone."""
    trace = read_trace(WEKA_PAIR)
    blocks = cache_blocks_while_running(kv_cache_memory_bytes)
    p = predict_tiers(
        trace,
        pool=POOL,
        bytes_per_token=KV_BYTES_PER_TOKEN,
        chunk_tokens=BLOCK_TOKENS,
        device_tokens=blocks * BLOCK_TOKENS,
        tiers_gib=[0],
        order=one_in_flight_order(trace, POOL),
        block_tokens=BLOCK_TOKENS,
        offload_pays=False,
    )
    return p["device_hit_tokens"] / trace.prompt_tokens


def _check_run(url: str, tmp_path: Path, kv_bytes: int) -> None:
    trace = read_trace(WEKA_PAIR)
    assert trace.header.meta["scaled"]["tokens_divisor"] == 64
    assert sum(1 for cs in trace.tasks.values() if cs[0].parent is not None) == 2
    predicted = predicted_hit_fraction(kv_bytes)  # registered before the server sees a call
    run = tmp_path / "run"
    summary, calls, counters, hits = _replay_with_counters(
        url, WEKA_PAIR, run, "--pool", str(POOL), "--gap-scale", "0", "--max-inflight", "1"
    )
    assert summary["status"] == "ok" and summary["errors"] == 0
    assert summary["calls"] == len(calls) == len(trace)
    assert summary["exact_match_rate"] == 1.0 and (calls["exact_match"] == 1.0).all()
    assert summary["prompt_mismatches"] == 0 and summary["completion_mismatches"] == 0
    assert int(calls["prompt_tokens"].sum()) == trace.prompt_tokens == counters["prompt_tokens"]
    assert int(calls["completion_tokens"].sum()) == trace.output_tokens
    # the run went in the order the prediction assumed
    assert read_run_order(run) == one_in_flight_order(trace, POOL)

    cached = int(calls["cached_tokens"].sum())
    assert cached == hits == counters["device_hit_tokens"]
    measured = cached / trace.prompt_tokens
    print(
        f"\nWEKA pair at {kv_bytes} KV bytes: hit fraction {measured:.4f}, predicted {predicted:.4f}"
    )
    assert abs(measured - predicted) <= TOLERANCE, (kv_bytes, measured, predicted)


def test_weka_pair_on_the_shared_server_matches_the_prediction(clean_cache, tmp_path):
    _check_run(clean_cache.base_url, tmp_path, SHARED_KV_BYTES)


def test_weka_pair_on_a_small_cache_matches_the_prediction(tiny_model, tmp_path):
    # the size matters here: the model says so before either run
    assert predicted_hit_fraction(SMALL_KV_BYTES) < predicted_hit_fraction(SHARED_KV_BYTES) - 0.1
    options = cpu_engine_options(SMALL_KV_BYTES, max_model_len=SMALL_MAX_MODEL_LEN)
    with running_vllm(options, tmp_path / "server") as server:
        _check_run(server.base_url, tmp_path, SMALL_KV_BYTES)


def test_weka_pair_trace_is_the_scaled_real_one():
    # the trace file the tests above replay: scaled WEKA prompts (1/64 of 100K+ tokens) that fit
    calls = read_trace(WEKA_PAIR).calls
    assert max(c.prompt_len + c.output_len for c in calls) <= SMALL_MAX_MODEL_LEN
    assert pd.Series([c.prompt_len for c in calls]).median() > 500
