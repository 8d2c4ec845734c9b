"""SGLang adapter: launch_server argv with HiCache (host tier), /flush_cache, metrics mapping.

Checked against SGLang 0.5.23's sources (`make test-contracts`; docs/engines.md): the flags are
dataclass fields under srt/arg_groups/fields/ (`--enable-hierarchical-cache`, `--hicache-size`
integral GB per rank overriding `--hicache-ratio`, `--hicache-write-policy`, `--page-size`,
`--max-total-tokens`, `--enable-metrics`, `--enable-cache-report`); the counters are in
srt/observability/metrics_collector.py (`sglang:cached_tokens_total{cache_source}`,
`sglang:hicache_backup_tokens_total{pool}`, `sglang:load_back_tokens_total{pool}`), one series per
scheduler rank (label `tp_rank`), every rank reporting the same logical count.

Per call: `return_cached_tokens_details` (srt/entrypoints/openai/protocol.py, CompletionRequest)
makes SGLang send the device/host split of `cached_tokens` in a response-level `sglext` object
(`SglExt.cached_tokens_details`; when streaming, a chunk of its own with no choices), which the
driver reads. Exact forcing: `--enable-custom-logit-processor` plus a per-request
`custom_logit_processor` (replay.engines.sglang_forcing) reading `custom_params.forced_token_ids`;
`return_token_ids` returns the ids so the run counts exact matches. `[run] forcing = false` falls
back to length forcing (max_tokens = min_tokens, ignore_eos).

Options: model (required), python, tp, device_kv_tokens (--max-total-tokens), mem_fraction_static,
host_tier_gib (HiCache host pool, GiB per rank; 0 = off), write_policy, page_size, io_backend,
extra_args, env.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from replay.counters import COMPUTED_PREFILL_TOKENS, Samples
from replay.engines.base import EngineAdapter, LaunchSpec, gpus_per_tp, openai_extras
from replay.engines.common import (
    FRACTION,
    INT_0,
    INT_1,
    LAUNCH_OPTION_TYPES,
    LAUNCH_OPTIONS,
    NUM_0,
    STR,
    check_option_types,
    extra_args,
    extra_env,
    flag_value,
    require,
)
from replay.engines.sglang_forcing import PARAM as FORCING_PARAM
from replay.engines.sglang_forcing import serialized_processor
from replay.errors import ConfigError
from replay.metrics.counters import difference, first_present, one_rank, sample_sum

__all__ = [
    "ADAPTER",
    "launch",
    "map_counters",
    "hicache_size_gb",
    "request_extras",
    "SGLANG_OPTIONS",
    "WRITE_POLICIES",
]

# The release the contract tests check this adapter against (make test-contracts).
PINNED_VERSION = "0.5.23"
# Read only as fallbacks for releases older than PINNED_VERSION (none: every name read is the
# pinned release's, sglang/srt/observability/metrics_collector.py).
LEGACY_METRICS: frozenset[str] = frozenset()

# The request's `custom_logit_processor`: the same string for every call, so SGLang's batch merges
# all forced rows under one processor instance.
FORCING_PROCESSOR = serialized_processor()

WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")

SGLANG_OPTIONS = LAUNCH_OPTIONS | {
    "tp",
    "device_kv_tokens",
    "mem_fraction_static",
    "host_tier_gib",
    "write_policy",
    "page_size",
    "io_backend",
    "seed",
    "max_running_requests",
}

SGLANG_OPTION_TYPES = {
    **LAUNCH_OPTION_TYPES,
    "tp": INT_1,
    "device_kv_tokens": INT_1,
    "mem_fraction_static": FRACTION,
    "host_tier_gib": NUM_0,
    "write_policy": STR,
    "page_size": INT_1,
    "io_backend": STR,
    "seed": INT_0,
    "max_running_requests": INT_1,
}

_VALUE_FLAGS = {
    "tp": "--tp-size",
    "device_kv_tokens": "--max-total-tokens",
    "mem_fraction_static": "--mem-fraction-static",
    "page_size": "--page-size",
    "seed": "--random-seed",
    "max_running_requests": "--max-running-requests",
    "served_model_name": "--served-model-name",
}


def hicache_size_gb(host_tier_gib: float) -> int:
    """`--hicache-size` for a tier of `host_tier_gib` GiB per rank: SGLang takes an integer
    number of decimal GB per rank (srt/mem_cache/pool_host/base.py allocates `size * 1e9` bytes
    in each rank), so GiB x 1.073741824, rounded to the nearest GB (at most 0.5 GB off)."""
    gb = round(float(host_tier_gib) * (1 << 30) / 1e9)
    if host_tier_gib > 0 and gb < 1:
        raise ConfigError(
            "engine sglang",
            "host_tier_gib",
            f"{host_tier_gib} GiB is under SGLang's smallest host pool (1 GB = 0.93 GiB)",
        )
    return gb


def launch(options: Mapping[str, Any], host: str, port: int) -> LaunchSpec:
    """argv + env for one SGLang server; metrics and per-request cache reports switched on."""
    check_option_types(options, "sglang", SGLANG_OPTION_TYPES)
    argv = [
        str(options.get("python", "python")),
        "-m",
        "sglang.launch_server",
        "--model-path",
        str(require(options, "model", "sglang")),
        "--host",
        host,
        "--port",
        str(port),
        "--enable-metrics",
        "--enable-cache-report",
        # the forcing processor is sent per request; SGLang refuses it without this flag
        "--enable-custom-logit-processor",
    ]
    for key, flag in _VALUE_FLAGS.items():
        if options.get(key) is not None:
            argv += [flag, flag_value(options[key])]
    host_gib = float(options.get("host_tier_gib") or 0)
    if host_gib > 0:
        policy = options.get("write_policy", "write_through")
        if policy not in WRITE_POLICIES:
            raise ConfigError(
                "engine sglang",
                "engine.write_policy",
                f"must be one of {', '.join(WRITE_POLICIES)}",
            )
        argv += [
            "--enable-hierarchical-cache",
            "--hicache-size",
            str(hicache_size_gb(host_gib)),
            "--hicache-write-policy",
            policy,
        ]
        if options.get("io_backend"):
            argv += ["--hicache-io-backend", str(options["io_backend"])]
    argv += extra_args(options, "sglang")
    return LaunchSpec(
        argv=argv,
        env=extra_env(options, "sglang"),
        health_path="/health",
        ready_timeout_s=float(options.get("ready_timeout_s", 900)),
    )


def map_counters(samples: Samples) -> dict[str, float | None]:
    """SGLang metrics -> canonical counters.

    Device hits and host restores come from `cached_tokens_total{cache_source=device|host}`
    (0.5.23, `metrics_collector.py`); a request whose split is missing is counted there under
    `cache_source="total"`, read here as device hits (its source is unknown; the tier that
    always answers). A family with no `cache_source` label at all (not the pinned release's
    shape) gives its total as device hits when no host restores are reported, and host restores
    come from `load_back_tokens_total{pool="kv"}` when the label gives none. Computed prefill is
    prompt - cached (all sources), which is what SGLang's scheduler computes. Every TP rank
    reports the same count under its own `tp_rank`, so one rank is read, not the sum.
    """
    samples = one_rank(samples, "tp_rank")
    cached = "sglang:cached_tokens_total"
    prompt = sample_sum(samples, "sglang:prompt_tokens_total")
    # the pinned release declares the family with its label and makes each series at its first
    # count: declared with no series yet is its shape before any hit
    series = samples.get(cached)
    labelled = series is not None and (not series or any("cache_source" in dict(k) for k in series))
    device = host = None
    if labelled:  # a labelled family without a device series means none yet
        device = (sample_sum(samples, cached, cache_source="device") or 0.0) + (
            sample_sum(samples, cached, cache_source="total") or 0.0
        )
        host = sample_sum(samples, cached, cache_source="host")
    host_restore = first_present(
        host, sample_sum(samples, "sglang:load_back_tokens_total", pool="kv")
    )
    if device is None and host_restore is None:
        device = sample_sum(samples, cached)
    return {
        "prompt_tokens": prompt,
        "output_tokens": sample_sum(samples, "sglang:generation_tokens_total"),
        "device_hit_tokens": device,
        "host_restore_tokens": host_restore,
        COMPUTED_PREFILL_TOKENS: difference(prompt, sample_sum(samples, cached)),
        "host_write_tokens": sample_sum(samples, "sglang:hicache_backup_tokens_total", pool="kv"),
        "host_evicted_tokens": None,
        # Retractions are SGLang's preemptions (`sglang:num_retracted_reqs` is a gauge of the
        # current step; the counter says `requests` so as not to clash with it)
        "preemptions": sample_sum(samples, "sglang:num_retracted_requests_total"),
    }


def request_extras(max_tokens: int, forced_output_ids: list[int] | None) -> dict[str, Any]:
    """Length forcing, the per-call cache split (`sglext.cached_tokens_details`), and with
    recorded ids the forcing processor with its ids in `custom_params`."""
    extras = openai_extras(max_tokens, forced_output_ids)
    extras["return_cached_tokens_details"] = True
    if forced_output_ids is not None:
        extras["custom_logit_processor"] = FORCING_PROCESSOR
        extras["custom_params"] = {FORCING_PARAM: list(forced_output_ids)}
        extras["return_token_ids"] = True
    return extras


def version_argv(options: Mapping[str, Any]) -> list[str]:
    return [str(options.get("python", "python")), "-c", "import sglang; print(sglang.__version__)"]


ADAPTER = EngineAdapter(
    name="sglang",
    launch=launch,
    resources=gpus_per_tp,
    request_extras=request_extras,
    map_counters=map_counters,
    reset_path="/flush_cache",
    forcing=True,
    # /v1/completions refuses max_tokens <= 0 ("max_tokens must be positive",
    # sglang/srt/entrypoints/openai/protocol.py:448-452 at 0.5.23, CompletionRequest)
    min_max_tokens=1,
    description="SGLang server; host tier = HiCache (--enable-hierarchical-cache --hicache-size)",
    version_argv=version_argv,
    option_names=SGLANG_OPTIONS,
)
