"""A server the user already runs: nothing is launched; the sweep talks to `url`.

Options: url (required, e.g. http://127.0.0.1:8000), kind (vllm|sglang|lmcache|llamacpp|sim-server:
whose metric mapping, reset path and request extras to use; default: guessed from the metric
prefixes of the first scrape), model (served model name, if the server needs one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from replay.counters import Samples
from replay.engines.base import EngineAdapter, openai_extras
from replay.errors import ConfigError

__all__ = ["make_adapter", "server_url", "EXTERNAL_OPTIONS"]

EXTERNAL_OPTIONS = frozenset({"url", "kind", "model", "served_model_name", "reset_path"})


def server_url(options: Mapping[str, Any]) -> str:
    """The base URL without a trailing `/` or `/v1` (the driver adds the paths)."""
    return str(options["url"]).rstrip("/").removesuffix("/v1")


def make_adapter(
    engines: Mapping[str, EngineAdapter],
    adapter_for_metrics: Callable[[Samples], EngineAdapter],
) -> EngineAdapter:
    """The `external` adapter. The registry passes in its own table and metric lookup (both read
    when called, not now), so this module does not import the registry: `kind` names whose
    adapter speaks for the server, else the metric prefixes it exposes decide."""

    def map_counters_auto(samples: Samples) -> dict[str, float | None]:
        return adapter_for_metrics(samples).map_counters(samples)

    def check_options(options: Mapping[str, Any]) -> None:
        if not isinstance(options.get("url"), str) or not options["url"]:
            raise ConfigError("engine external", "engine.url", "required: the server's base URL")
        from replay.driver.http_common import HttpOptions  # `replay run --url`'s own rule

        try:  # before the sweep starts, not as each run's crash
            HttpOptions(options["url"])
        except ValueError as e:
            raise ConfigError("engine external", "engine.url", str(e)) from None
        kind = options.get("kind")
        if kind is not None and (kind not in engines or kind == "external"):
            valid = ", ".join(sorted(set(engines) - {"external"}))
            raise ConfigError("engine external", "engine.kind", f"unknown {kind!r}; valid: {valid}")

    def personality(options: Mapping[str, Any]) -> EngineAdapter:
        kind = options.get("kind")
        return engines[str(kind)] if kind else adapter

    adapter = EngineAdapter(
        name="external",
        launch=lambda options, host, port: None,
        request_extras=openai_extras,
        # an unknown OpenAI-compatible server: ask for at least one token, which vLLM requires
        # and every server accepts
        min_max_tokens=1,
        map_counters=map_counters_auto,
        description="an already running OpenAI-compatible server at `url` (no launch)",
        option_names=EXTERNAL_OPTIONS,
        check_options=check_options,
        server_url=server_url,
        personality=personality,
    )
    return adapter
