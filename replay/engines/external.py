"""A server the user already runs: nothing is launched; the sweep talks to `url`.

Options: url (required, e.g. http://127.0.0.1:8000), kind (vllm|sglang|lmcache|llamacpp|sim-server:
whose metric mapping, reset path and request extras to use; default: guessed from the metric
prefixes of the first scrape), model (served model name, if the server needs one).
"""

from __future__ import annotations

from collections.abc import Callable

from replay.counters import Samples
from replay.engines.base import EngineAdapter, openai_extras

__all__ = ["make_adapter", "EXTERNAL_OPTIONS"]

EXTERNAL_OPTIONS = frozenset({"url", "kind", "model", "served_model_name", "reset_path"})


def make_adapter(adapter_for_metrics: Callable[[Samples], EngineAdapter]) -> EngineAdapter:
    """The `external` adapter. Its counters are mapped by the adapter whose metric prefix the
    server exposes (vllm:, sglang:, llamacpp:, replay_sim:), found by `adapter_for_metrics`: the
    registry passes its own lookup in, so this module does not import the registry."""

    def map_counters_auto(samples: Samples) -> dict[str, float | None]:
        return adapter_for_metrics(samples).map_counters(samples)

    return EngineAdapter(
        name="external",
        launch=lambda options, host, port: None,
        request_extras=openai_extras,
        map_counters=map_counters_auto,
        description="an already running OpenAI-compatible server at `url` (no launch)",
        option_names=EXTERNAL_OPTIONS,
    )
