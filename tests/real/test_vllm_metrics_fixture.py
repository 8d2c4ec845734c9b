"""The vLLM adapter's metric mapping on this project's own capture of a real vLLM 0.32 CPU server
(tests/fixtures/metrics/vllm-cpu-*.txt, taken by `python -m tests.real.vllm_workload`).

Not marked `vllm`: it reads fixture files only, so it runs in the default `make test`. The expected
deltas come from the workload's block arithmetic (tests/real/vllm_workload.py), not from the files.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from replay.engines import vllm
from replay.engines.registry import adapter_for_metrics
from replay.metrics.counters import counter_deltas, label_value
from replay.metrics.parse import parse_metrics
from tests.real.vllm_workload import FIXTURE_EXPECTED

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "metrics"
CAPTURE_KV_BYTES = 8 << 20  # the capture server's --kv-cache-memory-bytes


def _load(name: str):
    return parse_metrics((FIXTURES / name).read_text(), source=name)


@pytest.fixture(scope="module")
def before():
    return _load("vllm-cpu-before.txt")


@pytest.fixture(scope="module")
def after():
    return _load("vllm-cpu-after.txt")


def test_canonical_deltas_equal_the_workload_block_arithmetic(before, after):
    deltas = counter_deltas(vllm.map_counters(before), vllm.map_counters(after))
    for name in ("prompt_tokens", "output_tokens", "device_hit_tokens", "computed_prefill_tokens"):
        assert deltas[name] == FIXTURE_EXPECTED[name], name
    assert deltas["host_restore_tokens"] == 0  # no host tier on the CPU backend
    assert deltas["preemptions"] == 0
    # vLLM does not count host writes/evictions in tokens: unknown, never a made-up 0
    assert deltas["host_write_tokens"] is None and deltas["host_evicted_tokens"] is None


def test_fresh_server_starts_from_zero_and_requests_are_counted(before, after):
    assert vllm.map_counters(before)["prompt_tokens"] == 0
    ok = after["vllm:request_success_total"]
    assert sum(ok.values()) == FIXTURE_EXPECTED["requests"]


def test_the_hit_counters_agree_with_each_other(after):
    hits = sum(after["vllm:prefix_cache_hits_total"].values())
    by_source = after["vllm:prompt_tokens_cached_by_source_total"]
    device = sum(v for k, v in by_source.items() if ("source", "device") in k)
    assert hits == device == FIXTURE_EXPECTED["device_hit_tokens"]


def test_cache_config_info_shows_the_cpu_block_size_and_capacity(after):
    info = "vllm:cache_config_info"
    assert label_value(after, info, "block_size") == "128"
    # 8 MiB at 1 KiB per token = 64 blocks (one of which vLLM keeps as its null block)
    assert label_value(after, info, "num_gpu_blocks") == "64"
    assert vllm.verify(after, {"kv_cache_memory_bytes": CAPTURE_KV_BYTES}) == []
    assert vllm.verify(after, {"kv_cache_memory_bytes": 2 * CAPTURE_KV_BYTES})


def test_the_capture_is_recognised_as_vllm(after):
    assert adapter_for_metrics(after).name == "vllm"
