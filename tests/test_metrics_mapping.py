"""Prometheus parsing and each engine's mapping onto the canonical counters, on stored captures.

Expected numbers come from what was sent, not from the code: the vLLM capture's three requests
(3000 ids, the same 3000, then 3000 + 20 output + 500 new; 20 output tokens each; block 128)
give 9520 prompt tokens, 60 output tokens, and 2 x 23 full blocks = 5888 hit tokens.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from replay.counters import CANONICAL_COUNTERS
from replay.engines import lmcache, sglang, sim_engines, vllm
from replay.engines.registry import adapter_for_metrics
from replay.errors import EngineError
from replay.metrics import counter_deltas, label_value, parse_metrics, sample_sum

FIX = Path(__file__).parent / "fixtures" / "metrics"


def load(name: str):
    return parse_metrics((FIX / name).read_text(), source=name)


def test_vllm_capture_deltas_match_the_requests_sent():
    before = vllm.map_counters(load("vllm-0.32-cpu-before.txt"))
    after = vllm.map_counters(load("vllm-0.32-cpu-after.txt"))
    d = counter_deltas(before, after, CANONICAL_COUNTERS)
    prompt = 3000 + 3000 + (3000 + 20 + 500)
    hits = 2 * (3000 // 128) * 128  # request 2 and 3 each reuse 23 full blocks
    assert d["prompt_tokens"] == prompt
    assert d["output_tokens"] == 3 * 20
    assert d["device_hit_tokens"] == hits
    assert d["computed_prefill_tokens"] == prompt - hits
    assert d["host_restore_tokens"] == 0  # no host tier configured
    assert d["preemptions"] == 0
    # vLLM reports host writes in bytes, not tokens: unknown, never a made-up 0
    assert d["host_write_tokens"] is None and d["host_evicted_tokens"] is None


def test_vllm_fallbacks_for_older_metric_names():
    # Without the by-source families the older counters give the same answer.
    samples = {k: v for k, v in load("vllm-0.32-cpu-after.txt").items() if "by_source" not in k}
    m = vllm.map_counters(samples)
    assert m["device_hit_tokens"] == 5888
    assert m["computed_prefill_tokens"] == 3632  # request_prefill_kv_computed_tokens_sum


def test_vllm_verify_reads_cache_config_info():
    samples = load("vllm-0.32-cpu-after.txt")
    assert label_value(samples, "vllm:cache_config_info", "block_size") == "128"
    assert vllm.verify(samples, {"kv_cache_memory_bytes": 33554432}) == []
    problems = vllm.verify(samples, {"kv_cache_memory_bytes": 1 << 30, "host_tier_gib": 4})
    assert len(problems) == 2
    assert any("kv_cache_memory_bytes=33554432" in p for p in problems)
    assert any("kv_offloading_size=None" in p for p in problems)


def test_sglang_mapping_from_source_definitions():
    m = sglang.map_counters(load("sglang-main-synthetic.txt"))
    assert m == {
        "prompt_tokens": 10000,
        "output_tokens": 200,
        "device_hit_tokens": 6000,
        "host_restore_tokens": 1500,
        "computed_prefill_tokens": 10000 - 6000 - 1500,
        "host_write_tokens": 4096,
        "host_evicted_tokens": None,
        "preemptions": 1,
    }


def test_sglang_without_cache_source_label_falls_back():
    text = (
        "# TYPE sglang:prompt_tokens_total counter\nsglang:prompt_tokens_total 100\n"
        "# TYPE sglang:cached_tokens_total counter\nsglang:cached_tokens_total 40\n"
    )
    m = sglang.map_counters(parse_metrics(text))
    assert m["device_hit_tokens"] == 40
    assert m["host_restore_tokens"] is None
    assert m["computed_prefill_tokens"] == 60


def test_lmcache_mapping_takes_the_host_tier_from_lmcache():
    m = lmcache.map_counters(load("lmcache-vllm-synthetic.txt"))
    assert m["device_hit_tokens"] == 6000
    assert m["host_restore_tokens"] == 1500
    assert m["host_write_tokens"] == 4096
    assert m["computed_prefill_tokens"] == 2500


def test_lmcache_restores_are_the_tokens_vllm_did_not_compute_not_the_chunks_loaded():
    """One 4000-token prompt: 1000 tokens on the device, LMCache holds 3000 in 256-token chunks.
    LMCache loads from 768 (the device prefix rounded down to a chunk) and counts 2232; vLLM
    skips computing 2000. Restores are the 2000, so the split adds up to the prompt."""
    text = "".join(
        f"# TYPE {name} counter\n{name}_total{{{labels}}} {value}\n"
        for name, labels, value in (
            ("vllm:prompt_tokens", 'model_name="q"', 4000),
            ("vllm:prefix_cache_hits", 'model_name="q"', 1000),
            ("vllm:external_prefix_cache_hits", 'model_name="q"', 2000),
            ("vllm:prompt_tokens_by_source", 'model_name="q",source="local_compute"', 1000),
            ("lmcache:num_hit_tokens", 'worker_id="0"', 2232),
            ("lmcache:num_stored_tokens", 'worker_id="0"', 3072),
        )
    )
    m = lmcache.map_counters(parse_metrics(text))
    assert (m["device_hit_tokens"], m["host_restore_tokens"], m["computed_prefill_tokens"]) == (
        1000,
        2000,
        1000,
    )
    assert m["lmcache_retrieved_tokens"] == 2232 and m["host_write_tokens"] == 3072


def test_metric_prefix_picks_the_adapter():
    assert adapter_for_metrics(load("lmcache-vllm-synthetic.txt")).name == "lmcache"
    assert adapter_for_metrics(load("vllm-0.32-cpu-after.txt")).name == "vllm"
    assert adapter_for_metrics(load("sglang-main-synthetic.txt")).name == "sglang"
    unknown = adapter_for_metrics(parse_metrics("foo_total 1\n"))
    assert unknown.map_counters({}) == dict.fromkeys(CANONICAL_COUNTERS)


def test_sim_server_names_map_one_to_one():
    text = "".join(
        f"# TYPE replay_sim:{n} counter\nreplay_sim:{n}_total {i}\n"
        for i, n in enumerate(CANONICAL_COUNTERS)
    )
    m = sim_engines.map_counters(parse_metrics(text))
    assert m == {n: float(i) for i, n in enumerate(CANONICAL_COUNTERS)}


def test_absent_is_none_and_zero_is_zero():
    s = parse_metrics('# TYPE x counter\nx_total{a="1"} 0\nx_total{a="2"} 5\n')
    assert sample_sum(s, "x_total") == 5
    assert sample_sum(s, "x_total", a="1") == 0
    assert sample_sum(s, "x_total", a="3") is None
    assert sample_sum(s, "y_total") is None


def test_a_declared_counter_with_no_series_yet_has_counted_nothing():
    s = parse_metrics("# HELP x c\n# TYPE x counter\n# TYPE g gauge\n")
    assert sample_sum(s, "x_total") == 0 and sample_sum(s, "x_total", a="1") == 0
    assert sample_sum(s, "g") is None  # only counters: a gauge with no series says nothing


def test_sglang_run_from_a_fresh_server_counts_its_first_hits_and_retractions():
    """SGLang 0.5.23 makes a labelled counter's series at its first count
    (metrics_collector.py: `cached_tokens_total.labels(..., cache_source=...)` only for a hit),
    so the start scrape of a fresh server has the families and no series; the run's counters
    must still be the run's, not null. Rendered by prometheus_client, as SGLang renders them."""
    from prometheus_client import CollectorRegistry, Counter, generate_latest

    reg = CollectorRegistry()
    tok = {"model_name": "m", "is_streaming": "true"}
    rank = {"model_name": "m", "tp_rank": "0"}

    def counter(name, labels):
        return Counter(name, name, list(labels), registry=reg)

    prompt, out = (
        counter("sglang:prompt_tokens_total", tok),
        counter("sglang:generation_tokens_total", tok),
    )
    cached = counter("sglang:cached_tokens_total", [*tok, "cache_source"])
    retracted = counter("sglang:num_retracted_requests_total", rank)
    load = counter("sglang:load_back_tokens_total", [*rank, "pool"])
    prompt.labels(**tok).inc(512)  # the warm-up: no hit, no retraction, no load
    out.labels(**tok).inc(1)
    start = sglang.map_counters(parse_metrics(generate_latest(reg).decode()))
    prompt.labels(**tok).inc(10000)
    out.labels(**tok).inc(200)
    cached.labels(**tok, cache_source="device").inc(6000)
    cached.labels(**tok, cache_source="host").inc(1500)
    load.labels(**rank, pool="kv").inc(1500)
    retracted.labels(**rank).inc(1)
    end = sglang.map_counters(parse_metrics(generate_latest(reg).decode()))
    d = counter_deltas(start, end, CANONICAL_COUNTERS)
    assert (d["device_hit_tokens"], d["host_restore_tokens"]) == (6000, 1500)
    assert (d["computed_prefill_tokens"], d["preemptions"], d["prompt_tokens"]) == (2500, 1, 10000)


def test_deltas_propagate_unknowns_and_survive_counter_resets():
    d = counter_deltas({"a": 10, "b": None, "c": 5}, {"a": 25, "b": 3, "c": 2})
    assert d == {"a": 15, "b": None, "c": 2}


def test_malformed_exposition_is_an_engine_error():
    with pytest.raises(EngineError, match="not Prometheus"):
        parse_metrics('x{a="1" 3\n', source="http://h/metrics")
