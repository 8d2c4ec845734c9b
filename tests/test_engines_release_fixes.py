"""Adapter behaviour fixed against the released vLLM 0.33 / SGLang 0.5.23 / LMCache 0.5.6 sources
(the contract tier, tests/contracts, checks the names; these check what the adapters do with them)."""

from __future__ import annotations

import http.server
import threading

import pytest

from replay.engines import lmcache, sglang, vllm
from replay.engines.vllm_forcing import PROCESSOR_FQCN
from replay.engines.vllm_forcing_v2 import PROCESSOR_V2_FQCN
from replay.errors import ConfigError, EngineError
from replay.metrics.counters import one_rank
from replay.sweep import control


def processor(options):
    argv = vllm.launch({"model": "m", **options}, "h", 1).argv
    return argv[argv.index("--logits-processors") + 1]


def test_forcing_processor_follows_the_model_runner():
    assert processor({}) == PROCESSOR_V2_FQCN  # the pinned 0.33 runs Model Runner V2 on CUDA
    assert processor({"vllm_version": "0.32.0"}) == PROCESSOR_FQCN
    assert processor({"vllm_version": "0.33.0rc1"}) == PROCESSOR_V2_FQCN
    assert processor({"env": {"VLLM_USE_V2_MODEL_RUNNER": "0"}}) == PROCESSOR_FQCN  # fallback
    assert processor({"env": {"VLLM_USE_V2_MODEL_RUNNER": "1"}, "vllm_version": "0.32.0"}) == (
        PROCESSOR_V2_FQCN
    )
    # the CPU build has no Triton: 0.33 falls back to V1 there (config/vllm.py)
    assert processor({"device": "cpu"}) == PROCESSOR_FQCN
    assert vllm.version_tuple("0.32.0+cpu") == (0, 32, 0)


def test_the_runner_switch_is_an_integer_as_vllm_reads_it():
    """vLLM 0.33's envs.py reads VLLM_USE_V2_MODEL_RUNNER with bool(int(value)): "false" stops
    the server at start-up, so the experiment is refused before it launches anything."""
    with pytest.raises(ConfigError) as e:
        processor({"env": {"VLLM_USE_V2_MODEL_RUNNER": "false"}})
    assert e.value.field == "engine.env.VLLM_USE_V2_MODEL_RUNNER" and "integer" in e.value.why


def test_vllm_offloading_size_is_the_total_over_ranks_and_verified_so():
    a = vllm.launch({"model": "m", "tp": 4, "host_tier_gib": 16}, "h", 1).argv
    assert a[a.index("--kv-offloading-size") + 1] == "64"
    info = {
        "vllm:cache_config_info": {
            (("enable_prefix_caching", "True"), ("kv_offloading_size", "64.0")): 1.0
        }
    }
    assert vllm.verify(info, {"tp": 4, "host_tier_gib": 16}) == []
    assert vllm.verify(info, {"tp": 2, "host_tier_gib": 16})  # 32 wanted, 64 reported


def test_vllm_offload_bytes_new_names_first_then_the_deprecated_one():
    old = {
        "vllm:kv_offload_total_bytes_total": {
            (("transfer_type", "GPU_to_CPU"),): 100.0,
            (("transfer_type", "CPU_to_GPU"),): 40.0,
        }
    }
    new = {**old, "vllm:kv_offload_store_bytes_total": {(): 300.0},
           "vllm:kv_offload_load_bytes_total": {(): 120.0}}  # fmt: skip
    assert (
        vllm.map_counters(new)["host_write_bytes"],
        vllm.map_counters(new)["host_restore_bytes"],
    ) == (300.0, 120.0)
    assert (
        vllm.map_counters(old)["host_write_bytes"],
        vllm.map_counters(old)["host_restore_bytes"],
    ) == (100.0, 40.0)


def test_lmcache_tier_zero_is_plain_vllm_and_nothing_resets_lmcache():
    spec = lmcache.launch({"model": "m", "host_tier_gib": 0}, "h", 1)
    assert "--kv-transfer-config" not in spec.argv
    assert not any(k.startswith("LMCACHE_") for k in spec.env)
    assert "--kv-transfer-config" in lmcache.launch({"model": "m", "host_tier_gib": 2}, "h", 1).argv
    assert lmcache.ADAPTER.reset_path is None


def test_one_rank_is_read_not_the_sum_over_ranks():
    def series(label, ranks, value):
        return {((label, r), ("model_name", "m")): value for r in ranks}

    lm = {"lmcache:num_hit_tokens_total": series("worker_id", "01", 512.0),
          "lmcache:num_stored_tokens_total": series("worker_id", "01", 2048.0)}  # fmt: skip
    got = lmcache.map_counters(lm)
    assert got["host_restore_tokens"] == 512.0 and got["host_write_tokens"] == 2048.0
    sg = {"sglang:prompt_tokens_total": series("tp_rank", "01", 1000.0),
          "sglang:cached_tokens_total": {(("cache_source", s), ("tp_rank", r)): v
                                          for r in "01" for s, v in (("device", 300.0), ("host", 200.0))}}  # fmt: skip
    got = sglang.map_counters(sg)
    assert (got["device_hit_tokens"], got["host_restore_tokens"]) == (300.0, 200.0)
    assert got["computed_prefill_tokens"] == 500.0
    # Ranks sort numerically; series without the label are kept.
    mixed = {"x": {(("tp_rank", "10"),): 1.0, (("tp_rank", "2"),): 2.0, (): 5.0}}
    assert one_rank(mixed, "tp_rank") == {"x": {(("tp_rank", "2"),): 2.0, (): 5.0}}


def test_sglang_hicache_size_is_whole_gb_for_the_gib_tier():
    a = sglang.launch({"model": "m", "host_tier_gib": 64}, "h", 1).argv
    assert a[a.index("--hicache-size") + 1] == "69"  # 64 GiB = 68.72 GB
    with pytest.raises(ConfigError, match="host_tier_gib"):
        sglang.launch({"model": "m", "host_tier_gib": 0.25}, "h", 1)


class _ResetRefused(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = b'{"success":false}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_reset_answering_success_false_is_a_failed_reset():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ResetRefused)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with pytest.raises(EngineError, match="success: false"):
            control.reset_and_check(
                f"http://127.0.0.1:{server.server_port}", "/reset_prefix_cache", None
            )
    finally:
        server.shutdown()
        server.server_close()


def test_sglang_total_series_counts_as_device_hits():
    """0.5.23 counts a request without a cache split under cache_source="total"
    (metrics_collector.py); read as nothing, its cached tokens vanished from device hits while
    the computed prefill (prompt - all cached) still subtracted them."""
    sg = {
        "sglang:prompt_tokens_total": {(): 1000.0},
        "sglang:cached_tokens_total": {
            (("cache_source", "device"),): 300.0,
            (("cache_source", "host"),): 200.0,
            (("cache_source", "total"),): 50.0,
        },
    }
    got = sglang.map_counters(sg)
    assert (got["device_hit_tokens"], got["host_restore_tokens"]) == (350.0, 200.0)
    assert got["computed_prefill_tokens"] == 450.0
    # only a split-less total (every request without details): all device hits, no restores
    only_total = {**sg, "sglang:cached_tokens_total": {(("cache_source", "total"),): 80.0}}
    got = sglang.map_counters(only_total)
    assert (got["device_hit_tokens"], got["host_restore_tokens"]) == (80.0, None)
