"""`replay run` against the real vLLM: a multi-agent synthetic trace with reuse, and a WEKA Claude
Code trace cut to the model length. Every output must come back forced exactly, every length as
recorded, and the server's own counters must agree with the driver's per-call records."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import orjson
import pandas as pd
import pytest

from replay.engines.registry import get_engine
from replay.metrics.counters import counter_deltas
from replay.metrics.scrape import fetch_samples
from replay.trace.io import read_trace, write_trace
from replay.trace.model import Trace
from replay.trace.synth import synth
from tests.real.conftest import BLOCK_TOKENS, REPO

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]  # server start-up counts too

WEKA_TRACE = REPO.parent / "shared" / "traces" / "weka" / "trace_0060.json"
WEKA_PROMPT_TOKENS = 3072  # the tiny server's --max-model-len is 4096
# Decode on a shared 2-core CPU runs at ~10 tokens/s, and this trace records 2,395 output tokens:
# the test caps each output (prompts of a block trace do not depend on outputs, so every prompt
# stays exactly as recorded, then cut by --truncate-prompt-tokens).
WEKA_OUTPUT_TOKENS = 24


def _cap_outputs(trace: Trace, n: int) -> Trace:
    assert trace.header.tokens == "blocks"
    calls = [
        replace(
            c, output_len=min(c.output_len, n), output=None if c.output is None else c.output[:n]
        )
        for c in trace.calls
    ]
    return Trace(trace.header, calls)


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


def test_weka_trace_replays_with_prompts_cut_to_the_model_length(clean_cache, tmp_path):
    url = clean_cache.base_url
    trace_path = tmp_path / "weka.jsonl.gz"
    subprocess.run(
        [sys.executable, "-m", "replay.cli.main", "trace", "import", "--from", "weka",
         str(WEKA_TRACE), "-o", str(trace_path), "--vocab-size", "8192"],
        cwd=REPO, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    trace = _cap_outputs(read_trace(trace_path), WEKA_OUTPUT_TOKENS)
    write_trace(trace, trace_path)
    assert max(c.prompt_len for c in trace.calls) > 8 * WEKA_PROMPT_TOKENS  # really needs cutting
    summary, calls, counters, hits = _replay_with_counters(
        url, trace_path, tmp_path / "run", "--pool", "1", "--gap-scale", "0",
        "--truncate-prompt-tokens", str(WEKA_PROMPT_TOKENS),
    )  # fmt: skip

    assert summary["status"] == "ok" and summary["errors"] == 0
    assert summary["calls"] == len(trace)
    assert summary["exact_match_rate"] == 1.0
    want = {
        (c.task, c.index): (min(c.prompt_len, WEKA_PROMPT_TOKENS), c.output_len)
        for c in trace.calls
    }
    got = {
        (r.task, r.call): (r.prompt_tokens_reported, r.completion_tokens)
        for r in calls.itertuples()
    }
    assert got == want
    assert int(calls["cached_tokens"].sum()) == hits == counters["device_hit_tokens"]
