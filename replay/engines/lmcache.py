"""vLLM + LMCache adapter: vLLM's argv with the LMCache connector; LMCache sized by environment.

Checked against LMCache 0.5.6's sources (observability.py: counters `lmcache:num_hit_tokens`,
`lmcache:num_stored_tokens`, exposed with prometheus_client's `_total` suffix and one series per
worker, label `worker_id`; v1/config.py: `LMCACHE_*` environment variables, `LMCACHE_CHUNK_SIZE`
tokens, `LMCACHE_LOCAL_CPU`, `LMCACHE_MAX_LOCAL_CPU_SIZE` in GiB per worker, as
storage_backend/local_cpu_backend.py allocates `size * 1024**3` bytes in each worker). LMCache runs
inside vLLM's worker processes, so its metrics need vLLM's multiprocess Prometheus directory
(`PROMETHEUS_MULTIPROC_DIR`).

At host_tier_gib = 0 the point runs as plain vLLM without the connector: LMCache creates no CPU
backend at size 0 but its storage manager still looks one up, so the server would not start.

No cache reset: vLLM's `reset_external` calls the connector's `reset_cache`, which
LMCacheConnectorV1 (vllm 0.33.0 kv_connector/v1/lmcache_connector.py) does not implement; the base
class answers success without clearing anything, so a probe after the reset still hits LMCache
and a reset check could never pass.

Requests carry `kv_transfer_params = {"efficientagent.task_id": task}` by default
(`[run] efficientagent_task_id`, `replay run --efficientagent-task-id`): the EfficientAgent study's
connector, a subclass of LMCacheConnectorV1, counts active tasks by it; LMCache itself forwards only
`lmcache.*` keys of kv_transfer_params (lmcache 0.5.6 integration/vllm/utils.py), so the plain
connector ignores it.

Options: the vLLM ones (model, tp, device_kv_gib, ...) plus host_tier_gib (LMCache local CPU size,
GiB per rank), chunk_tokens (default 256), prometheus_dir.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from replay.counters import Samples
from replay.engines import vllm
from replay.engines.base import EngineAdapter, LaunchSpec
from replay.engines.common import INT_1, STR, check_option_types, extra_args, extra_env, flag_value
from replay.metrics.counters import first_present, one_rank, sample_sum

__all__ = ["ADAPTER", "launch", "map_counters", "LMCACHE_OPTIONS"]

# The LMCache release the contract tests check this adapter against (vLLM's is vllm.PINNED_VERSION).
PINNED_VERSION = "0.5.6"

LMCACHE_OPTIONS = (vllm.VLLM_OPTIONS - {"dev_mode"}) | {"chunk_tokens", "prometheus_dir"}

LMCACHE_OPTION_TYPES = {
    **{k: v for k, v in vllm.VLLM_OPTION_TYPES.items() if k in LMCACHE_OPTIONS},
    "chunk_tokens": INT_1,
    "prometheus_dir": STR,
}

CONNECTOR = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}


def launch(options: Mapping[str, Any], host: str, port: int) -> LaunchSpec:
    """vLLM argv + `--kv-transfer-config` for LMCacheConnectorV1; LMCache's CPU tier via env.
    Tier 0: plain vLLM (no connector, no LMCache environment)."""
    check_option_types(options, "lmcache", LMCACHE_OPTION_TYPES)
    argv = vllm.server_argv(options, host, port, engine="lmcache")
    host_gib = float(options.get("host_tier_gib") or 0)
    env = {"VLLM_SERVER_DEV_MODE": "1"}
    if host_gib > 0:
        argv += ["--kv-transfer-config", orjson.dumps(CONNECTOR).decode()]
        env |= {
            "LMCACHE_CHUNK_SIZE": str(int(options.get("chunk_tokens", 256))),
            "LMCACHE_LOCAL_CPU": "True",
            "LMCACHE_MAX_LOCAL_CPU_SIZE": flag_value(host_gib),
            "PROMETHEUS_MULTIPROC_DIR": str(
                options.get("prometheus_dir", "/tmp/replay-lmcache-prom")
            ),
        }
    argv += extra_args(options, "lmcache")
    env.update(extra_env(options, "lmcache"))
    return LaunchSpec(
        argv=argv,
        env=env,
        health_path="/health",
        ready_timeout_s=float(options.get("ready_timeout_s", 900)),
    )


def map_counters(samples: Samples) -> dict[str, float | None]:
    """vLLM's counters, with the host tier through the connector: restores = the tokens vLLM did
    not compute because LMCache had them (`vllm:external_prefix_cache_hits_total`), writes =
    LMCache's `num_stored_tokens_total` (its help text: 'including evicted ones').

    Not LMCache's own `num_hit_tokens_total` (kept as `lmcache_retrieved_tokens`): LMCache loads
    whole chunks from the device prefix rounded down to its chunk size
    (integration/vllm/vllm_v1_adapter.py, `masked_token_count`) and counts every token it loads
    (v1/cache_engine.py), so a request that also hits on the device counts up to a chunk less
    one of device-hit tokens again, and device + host + computed exceeded the prompt.

    Each TP worker stores and hits its own shard of the same tokens and reports them under its
    own `worker_id`, so one worker's series is the token count; the sum would be TP x it."""
    out = vllm.map_counters(samples)
    lm = one_rank({k: v for k, v in samples.items() if k.startswith("lmcache:")}, "worker_id")
    retrieved = sample_sum(lm, "lmcache:num_hit_tokens_total")
    out["host_restore_tokens"] = first_present(
        sample_sum(samples, "vllm:external_prefix_cache_hits_total"), retrieved
    )
    out["lmcache_retrieved_tokens"] = retrieved
    out["host_write_tokens"] = sample_sum(lm, "lmcache:num_stored_tokens_total")
    # vLLM counts LMCache hits as external: local device hits are prefix_cache_hits_total.
    local = sample_sum(samples, "vllm:prefix_cache_hits_total")
    if local is not None:
        out["device_hit_tokens"] = local
    return out


def verify(samples: Samples, options: Mapping[str, Any]) -> list[str]:
    """vLLM's own configuration check, without its host-tier part (LMCache holds the host tier)."""
    return vllm.verify(samples, {k: v for k, v in options.items() if k != "host_tier_gib"})


ADAPTER = EngineAdapter(
    name="lmcache",
    launch=launch,
    resources=vllm.resources,
    request_extras=vllm.request_extras,
    map_counters=map_counters,
    reset_path=None,  # see the module docstring: LMCache cannot be emptied through vLLM
    # LMCacheStatsLogger adds each interval's counts to its Prometheus counters every 10 s
    # (v1/cache_engine.py: log_interval=10; observability.py: log_worker), plus a second
    metrics_lag_s=11.0,
    forcing=True,
    min_max_tokens=vllm.ADAPTER.min_max_tokens,  # vLLM's OpenAI server checks the request
    sends_task_id=True,
    description="vLLM with LMCacheConnectorV1; host tier = LMCache local CPU (LMCACHE_MAX_LOCAL_CPU_SIZE)",
    verify=verify,
    version_argv=lambda o: [
        str(o.get("python", "python")),
        "-c",
        "import vllm, lmcache; print(vllm.__version__, getattr(lmcache, '__version__', '?'))",
    ],
    option_names=LMCACHE_OPTIONS,
)
