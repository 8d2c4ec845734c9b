"""`replay run` against the real vLLM: a multi-agent synthetic trace with reuse. Every output must
come back forced exactly, every length as recorded, and the server's own counters must agree with
the driver's per-call records. Real WEKA traces, scaled to the model, are in test_vllm_weka.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pandas as pd
import pytest

from replay.engines.registry import get_engine
from replay.metrics.counters import counter_deltas
from replay.metrics.scrape import fetch_samples
from replay.trace.io import write_trace
from replay.trace.synth import synth
from tests.real.conftest import BLOCK_TOKENS, REPO

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]  # server start-up counts too


def _replay(*args: str) -> dict:
    """`replay ARGS --json` in a subprocess, as a user runs it; returns the summary."""
    proc = subprocess.run(
        [sys.executable, "-m", "replay.cli.main", *args, "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return orjson.loads(proc.stdout.strip().splitlines()[-1])


def _canonical(url: str) -> tuple[dict, dict]:
    samples = fetch_samples(url + "/metrics")
    hits = {"prefix_cache_hits": sum(samples["vllm:prefix_cache_hits_total"].values())}
    return get_engine("vllm").map_counters(samples), hits


def _replay_with_counters(url: str, trace_path: Path, out: Path, *extra: str):
    before, hits_before = _canonical(url)
    summary = _replay(
        "run", "--trace", str(trace_path), "--out", str(out), "--url", url,
        "--engine-kind", "vllm", *extra,
    )  # fmt: skip
    after, hits_after = _canonical(url)
    calls = pd.read_parquet(out / "calls.parquet")
    hits = hits_after["prefix_cache_hits"] - hits_before["prefix_cache_hits"]
    return summary, calls, counter_deltas(before, after), hits


def test_multi_agent_replay_is_forced_exactly_and_matches_server_counters(clean_cache, tmp_path):
    url = clean_cache.base_url
    trace = synth(
        "swe-agent", tasks=6, seed=3, vocab_size=8192, scale=0.05,
        max_calls_per_task=6, max_prompt_tokens=3000,
    )  # fmt: skip
    trace_path = tmp_path / "agents.jsonl.gz"
    write_trace(trace, trace_path)
    summary, calls, counters, hits = _replay_with_counters(
        url, trace_path, tmp_path / "run", "--pool", "3", "--gap-scale", "0.01"
    )

    assert summary["status"] == "ok" and summary["errors"] == 0
    assert summary["calls"] == len(calls) == len(trace)
    # every output forced exactly, every length as recorded
    assert summary["exact_match_rate"] == 1.0
    assert (calls["exact_match"] == 1.0).all()
    assert summary["prompt_mismatches"] == 0 and summary["completion_mismatches"] == 0
    assert (calls["prompt_tokens_reported"] == calls["prompt_tokens"]).all()
    assert (calls["completion_tokens"] == calls["max_tokens"]).all()
    assert int(calls["prompt_tokens"].sum()) == trace.prompt_tokens
    assert int(calls["max_tokens"].sum()) == trace.output_tokens

    # the server's counters and the driver's records tell the same story
    cached = int(calls["cached_tokens"].sum())
    assert (calls["cached_tokens"] % BLOCK_TOKENS == 0).all()
    assert cached == hits
    assert counters["prompt_tokens"] == trace.prompt_tokens
    assert counters["output_tokens"] == trace.output_tokens
    assert counters["device_hit_tokens"] == cached
    assert counters["computed_prefill_tokens"] == trace.prompt_tokens - cached
    assert counters["host_restore_tokens"] == 0  # the CPU backend has no host tier
    # agents re-send their growing contexts: most prompt tokens must be hits
    assert cached > 0.6 * trace.prompt_tokens
