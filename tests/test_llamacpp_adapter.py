"""The llama.cpp adapter without a server: launch argv, option checks, request extras, and the
metric mapping on a real /metrics capture (tests/fixtures/metrics/llamacpp-xllamacpp-*.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from replay.counters import CANONICAL_COUNTERS
from replay.engines.llamacpp import ADAPTER, cache_ram_mib, launch, map_counters
from replay.engines.registry import ENGINES, adapter_for_metrics
from replay.errors import ConfigError
from replay.metrics.counters import counter_deltas
from replay.metrics.parse import parse_metrics

FIXTURES = Path(__file__).parent / "fixtures" / "metrics"


def samples(name: str):
    return parse_metrics((FIXTURES / f"llamacpp-xllamacpp-{name}.txt").read_text())


def test_registered_and_recognised_by_metric_prefix():
    assert ENGINES["llamacpp"] is ADAPTER
    assert adapter_for_metrics(samples("after")) is ADAPTER


def test_mapping_of_the_real_capture():
    """Capture story (fixtures README): P (500 ids), then P + 100 new ids, 5 output tokens each."""
    before, after = map_counters(samples("before")), map_counters(samples("after"))
    delta = counter_deltas(before, after)
    assert delta["prompt_tokens"] == 1100
    assert delta["cached_tokens"] == 500
    assert delta["computed_prefill_tokens"] == 600
    assert delta["output_tokens"] == 10
    # the server cannot tell slot hits from RAM-tier restores, nor count writes: unknown, not 0
    for name in ("device_hit_tokens", "host_restore_tokens", "host_write_tokens",
                 "host_evicted_tokens", "preemptions"):  # fmt: skip
        assert after[name] is None
    assert set(CANONICAL_COUNTERS) <= set(after)


def test_mapping_of_an_unrelated_server_is_all_none():
    mapped = map_counters(parse_metrics("other_metric_total 3\n"))
    assert all(mapped[k] is None for k in CANONICAL_COUNTERS)


def test_launch_wheel_runner_with_ready_file():
    spec = launch({"cache_ram_mib": 16, "slots": 3}, "127.0.0.1", 0)
    argv = spec.argv
    assert argv[1:3] == ["-m", "replay.engines.llamacpp_runner"]
    assert argv[argv.index("--cache-ram-mib") + 1] == "16"
    assert argv[argv.index("--slots") + 1] == "3"
    assert argv[argv.index("--model") + 1] == "tiny"
    assert argv[argv.index("--http-threads") + 1] == "64"  # one per held connection (docstring)
    assert spec.ready_file_flag == "--ready-file"


def test_binary_argv_carries_the_http_threads():
    from replay.engines.llamacpp_runner import build_parser, server_bin_argv

    spec = launch({"server_bin": "/opt/llama-server", "http_threads": 96}, "h", 9)
    args = build_parser().parse_args(spec.argv[3:])
    argv = server_bin_argv(args, "/m.gguf")
    assert argv[argv.index("--threads-http") + 1] == "96"
    with pytest.raises(ConfigError, match="engine.http_threads"):
        launch({"http_threads": 0}, "h", 9)


def test_launch_binary_gets_its_port_and_extra_args():
    spec = launch({"server_bin": "/opt/llama-server", "extra_args": ["--flash-attn", "on"]}, "h", 9)
    assert spec.ready_file_flag is None
    assert spec.argv[spec.argv.index("--server-bin") + 1] == "/opt/llama-server"
    assert "--extra=--flash-attn" in spec.argv and "--extra=on" in spec.argv
    assert spec.argv[spec.argv.index("--port") + 1] == "9"


def test_extra_args_without_a_binary_are_refused_not_dropped():
    """The wheel's embedded server is configured through its parameters: a command line given
    to it was parsed by the runner and then never used."""
    with pytest.raises(ConfigError, match="engine.extra_args.*server_bin"):
        launch({"extra_args": ["--no-cache-prompt"]}, "h", 9)


def test_cache_ram_from_host_tier_gib_and_validation():
    assert cache_ram_mib({}) == 0
    assert cache_ram_mib({"host_tier_gib": 0.015625}) == 16
    assert cache_ram_mib({"cache_ram_mib": 8, "host_tier_gib": 1}) == 8
    with pytest.raises(ConfigError, match="engine.cache_ram_mib"):
        cache_ram_mib({"cache_ram_mib": 1.5})
    with pytest.raises(ConfigError, match="engine.host_tier_gib"):
        cache_ram_mib({"host_tier_gib": -1})
    with pytest.raises(ConfigError, match="engine.slots"):
        launch({"slots": 0}, "127.0.0.1", 0)


def test_request_extras_force_length_not_ids():
    extras = ADAPTER.request_extras(17, [1, 2, 3])
    assert extras == {"max_tokens": 17, "ignore_eos": True, "cache_prompt": True}
    assert ADAPTER.forcing is False
