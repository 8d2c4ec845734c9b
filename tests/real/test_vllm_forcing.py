"""Real vLLM on CPU, spoken to directly: cached_tokens in whole blocks, and the forcing processor
returns exactly the ids it was given, per request, in a mixed concurrent batch."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from replay.metrics.scrape import fetch_samples
from tests.real.vllm_workload import BLOCK, complete, random_ids

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]  # server start-up counts too


def _hits(url: str) -> float:
    samples = fetch_samples(url + "/metrics")
    return sum(samples["vllm:prefix_cache_hits_total"].values())


@pytest.mark.parametrize("length", [1000, 1024, 1025])
def test_warm_prompt_hits_its_full_blocks_but_never_the_last_token(clean_cache, length):
    url = clean_cache.base_url
    prompt = random_ids(random.Random(length), length)
    before = _hits(url)
    cold = complete(url, prompt, 4)
    warm = complete(url, prompt, 4)
    assert cold.status == warm.status == 200
    assert cold.cached_tokens == 0
    # a prompt always computes its last token, so at most (length - 1) // BLOCK blocks can hit
    assert warm.cached_tokens == (length - 1) // BLOCK * BLOCK
    assert warm.usage["prompt_tokens"] == length
    assert _hits(url) - before == warm.cached_tokens


def test_forced_ids_come_back_exactly_for_each_request_of_a_mixed_batch(clean_cache):
    url = clean_cache.base_url
    rng = random.Random(5)
    jobs = []
    for i in range(12):
        n = rng.randrange(8, 40)
        forced = random_ids(rng, n) if i % 3 else None  # every third request runs free
        jobs.append((random_ids(rng, rng.randrange(100, 900)), n, forced))
    with httpx.Client(timeout=300) as client, ThreadPoolExecutor(6) as pool:
        # sampling at temperature 1 too: forcing must not depend on greedy decoding
        results = list(
            pool.map(
                lambda j: complete(url, j[0], j[1], j[2], client=client, temperature=1.0), jobs
            )
        )
    for (_, n, forced), r in zip(jobs, results, strict=True):
        assert r.status == 200, r.body
        assert r.usage["completion_tokens"] == len(r.ids) == n
        if forced is not None:
            assert r.ids == forced


def test_forcing_stops_at_the_end_of_the_list_and_can_force_eos(clean_cache):
    url = clean_cache.base_url
    prompt = random_ids(random.Random(3), 300)
    short = complete(url, prompt, 6, [17, 18])
    assert short.status == 200 and short.ids[:2] == [17, 18] and len(short.ids) == 6
    # id 1 is the tiny model's EOS: with ignore_eos the request still runs its full length
    eos = complete(url, prompt, 3, [1, 1, 1])
    assert eos.ids == [1, 1, 1]


@pytest.mark.parametrize(
    "bad, why",
    [
        ([1, 2, "x"], "[2]"),
        ([1.5], "[0]"),
        ([-4], "[0]"),
        (7, "must be a list"),
    ],
)
def test_bad_forced_ids_are_refused_with_400_naming_the_field(clean_cache, bad, why):
    r = complete(clean_cache.base_url, [5, 6, 7], 2, bad)
    assert r.status == 400
    message = r.body["error"]["message"]
    assert "forced_token_ids" in message and why in message


def test_max_tokens_0_is_refused_so_a_prefill_only_call_asks_for_one(clean_cache, tmp_path):
    """The fact the adapter's `min_max_tokens = 1` rests on, from the real server; and a trace
    whose call recorded no output (the WEKA set has two) replays cleanly, asking for 1."""
    import subprocess
    import sys

    import orjson
    import pandas as pd

    from replay.trace.io import write_trace
    from tests.real.conftest import REPO
    from tests.servers import make_trace

    url = clean_cache.base_url
    r = complete(url, [5, 6, 7], 0)
    assert r.status == 400 and "max_tokens must be at least 1" in r.body["error"]["message"]
    trace = tmp_path / "t.jsonl"
    write_trace(make_trace({"a": [{"new": 40, "out": 3}, {"new": 20, "out": 0}, {}]}), trace)
    out = tmp_path / "o"
    proc = subprocess.run(
        [sys.executable, "-m", "replay.cli.main", "run", "--trace", str(trace), "--pool", "1", "--out", str(out),
         "--url", url, "--engine-kind", "vllm", "--gap-scale", "0", "--strict", "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = orjson.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["status"] == "ok" and summary["errors"] == 0
    rows = pd.read_parquet(out / "calls.parquet").sort_values("call")
    assert rows["max_tokens"].tolist() == [3, 1, 4]
    assert rows["completion_tokens"].tolist() == [3, 1, 4]
