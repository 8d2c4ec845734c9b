"""A server the user already runs: nothing is launched; the sweep talks to `url`.

Options: url (required, e.g. http://127.0.0.1:8000), kind (vllm|sglang|lmcache|llamacpp|sim-server:
whose metric mapping, reset path and request extras to use; default: guessed from the metric
prefixes of the first scrape), model (served model name, if the server needs one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from replay.engines.base import EngineAdapter, Samples, openai_extras
from replay.errors import ConfigError

__all__ = ["ADAPTER", "map_counters_auto", "EXTERNAL_OPTIONS"]

EXTERNAL_OPTIONS = frozenset({"url", "kind", "model", "served_model_name", "reset_path"})


def map_counters_auto(samples: Samples) -> dict[str, float | None]:
    """Map with the adapter whose metric prefix the server exposes (vllm:, sglang:, llamacpp:,
    replay_sim:); all None when none matches."""
    from replay.engines.registry import adapter_for_metrics

    return adapter_for_metrics(samples).map_counters(samples)


def check_options(options: Mapping[str, Any]) -> None:
    """`url` names the server; `kind`, when given, is a registered engine that is not itself
    external."""
    if not isinstance(options.get("url"), str) or not options["url"]:
        raise ConfigError("engine external", "engine.url", "required: the server's base URL")
    kind = options.get("kind")
    if kind is not None:
        from replay.engines.registry import ENGINES

        if kind not in ENGINES or kind == "external":
            valid = ", ".join(sorted(set(ENGINES) - {"external"}))
            raise ConfigError("engine external", "engine.kind", f"unknown {kind!r}; valid: {valid}")


def server_url(options: Mapping[str, Any]) -> str:
    """The base URL without a trailing `/` or `/v1` (the driver adds the paths)."""
    return str(options["url"]).rstrip("/").removesuffix("/v1")


def personality(options: Mapping[str, Any]) -> EngineAdapter:
    """The named `kind`'s adapter, else this one (its mapping follows the metric prefixes)."""
    from replay.engines.registry import get_engine

    return get_engine(str(options["kind"])) if options.get("kind") else ADAPTER


ADAPTER = EngineAdapter(
    name="external",
    launch=lambda options, host, port: None,
    request_extras=openai_extras,
    map_counters=map_counters_auto,
    description="an already running OpenAI-compatible server at `url` (no launch)",
    option_names=EXTERNAL_OPTIONS,
    check_options=check_options,
    server_url=server_url,
    personality=personality,
)
