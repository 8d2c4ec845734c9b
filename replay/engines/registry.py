"""The one explicit engine registry: name -> EngineAdapter. No import magic, no entry points.

Adding an engine: write `replay/engines/<name>.py` exposing `ADAPTER`, import it here, add an
experiment file. `get_engine(name)` is how everything else looks adapters up.
"""

from __future__ import annotations

from replay.counters import CANONICAL_COUNTERS, Samples
from replay.engines import external, llamacpp, lmcache, sglang, sim_engines, vllm
from replay.engines.base import EngineAdapter
from replay.errors import ConfigError

__all__ = ["ENGINES", "get_engine", "adapter_for_metrics", "METRIC_PREFIXES"]


ENGINES: dict[str, EngineAdapter] = {
    "sim": sim_engines.SIM,
    "sim-server": sim_engines.SIM_SERVER,
    "vllm": vllm.ADAPTER,
    "sglang": sglang.ADAPTER,
    "lmcache": lmcache.ADAPTER,
    "llamacpp": llamacpp.ADAPTER,
}
# `external` reads the table and the metric lookup (below) when it is asked, not now.
ENGINES["external"] = external.make_adapter(ENGINES, lambda samples: adapter_for_metrics(samples))

# Which adapter maps a server's metrics, judged by the metric-name prefix it exposes.
METRIC_PREFIXES = (
    ("lmcache:", "lmcache"),
    ("vllm:", "vllm"),
    ("sglang:", "sglang"),
    ("llamacpp:", "llamacpp"),
    ("replay_sim:", "sim-server"),
)


def get_engine(name: str) -> EngineAdapter:
    """The adapter registered as `name`; unknown names raise ConfigError listing the valid ones."""
    try:
        return ENGINES[name]
    except KeyError:
        valid = ", ".join(sorted(ENGINES))
        raise ConfigError(
            "engine", "engine.kind", f"unknown engine {name!r}; valid: {valid}"
        ) from None


def _unknown(samples: Samples) -> dict[str, float | None]:
    return dict.fromkeys(CANONICAL_COUNTERS)


_UNKNOWN = EngineAdapter(
    name="unknown",
    launch=lambda o, h, p: None,
    request_extras=lambda n, ids: {},
    map_counters=_unknown,
)


def adapter_for_metrics(samples: Samples) -> EngineAdapter:
    """The adapter whose metric prefix appears first in METRIC_PREFIXES order (LMCache before
    vLLM, since an LMCache server exposes both); an all-None mapper when nothing matches."""
    for prefix, name in METRIC_PREFIXES:
        if any(k.startswith(prefix) for k in samples):
            return ENGINES[name]
    return _UNKNOWN
