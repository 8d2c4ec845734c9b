"""vLLM + LMCache adapter: vLLM's argv with the LMCache connector; LMCache sized by environment.

Checked against LMCache's sources (observability.py: counters `lmcache:num_hit_tokens`,
`lmcache:num_stored_tokens`, `lmcache:num_requested_tokens`, exposed with prometheus_client's
`_total` suffix; configuration from `LMCACHE_*` environment variables: `LMCACHE_CHUNK_SIZE`
tokens, `LMCACHE_LOCAL_CPU`, `LMCACHE_MAX_LOCAL_CPU_SIZE` GB). LMCache runs inside vLLM's worker
processes, so its metrics need vLLM's multiprocess Prometheus directory (`PROMETHEUS_MULTIPROC_DIR`).

Options: the vLLM ones (model, tp, device_kv_gib, ...) plus host_tier_gib (LMCache local CPU size,
GB), chunk_tokens (default 256), prometheus_dir.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from replay.counters import Samples
from replay.engines import vllm
from replay.engines.base import EngineAdapter, LaunchSpec
from replay.engines.common import extra_args, extra_env, flag_value
from replay.metrics.counters import sample_sum

__all__ = ["ADAPTER", "launch", "map_counters", "LMCACHE_OPTIONS"]

LMCACHE_OPTIONS = (vllm.VLLM_OPTIONS - {"dev_mode"}) | {"chunk_tokens", "prometheus_dir"}

CONNECTOR = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}


def launch(options: Mapping[str, Any], host: str, port: int) -> LaunchSpec:
    """vLLM argv + `--kv-transfer-config` for LMCacheConnectorV1; LMCache's CPU tier via env."""
    argv = vllm.server_argv(options, host, port, engine="lmcache")
    argv += ["--kv-transfer-config", orjson.dumps(CONNECTOR).decode()]
    argv += extra_args(options, "lmcache")
    host_gib = float(options.get("host_tier_gib") or 0)
    env = {
        "VLLM_SERVER_DEV_MODE": "1",
        "LMCACHE_CHUNK_SIZE": str(int(options.get("chunk_tokens", 256))),
        "LMCACHE_LOCAL_CPU": "True" if host_gib > 0 else "False",
        "LMCACHE_MAX_LOCAL_CPU_SIZE": flag_value(host_gib),
        "PROMETHEUS_MULTIPROC_DIR": str(options.get("prometheus_dir", "/tmp/replay-lmcache-prom")),
    }
    env.update(extra_env(options, "lmcache"))
    return LaunchSpec(
        argv=argv,
        env=env,
        health_path="/health",
        ready_timeout_s=float(options.get("ready_timeout_s", 900)),
    )


def map_counters(samples: Samples) -> dict[str, float | None]:
    """vLLM's counters, with the host tier from LMCache's: restores = `num_hit_tokens_total`,
    writes = `num_stored_tokens_total` (its help text: 'including evicted ones')."""
    out = vllm.map_counters(samples)
    out["host_restore_tokens"] = sample_sum(samples, "lmcache:num_hit_tokens_total")
    out["host_write_tokens"] = sample_sum(samples, "lmcache:num_stored_tokens_total")
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
    request_extras=vllm.request_extras,
    map_counters=map_counters,
    reset_path="/reset_prefix_cache?reset_external=true",
    forcing=True,
    description="vLLM with LMCacheConnectorV1; host tier = LMCache local CPU (LMCACHE_MAX_LOCAL_CPU_SIZE)",
    verify=verify,
    version_argv=lambda o: [
        str(o.get("python", "python")),
        "-c",
        "import vllm, lmcache; print(vllm.__version__, getattr(lmcache, '__version__', '?'))",
    ],
    option_names=LMCACHE_OPTIONS,
)
