"""What an engine adapter is: data plus a few small functions. Registered in `replay.engines.ENGINES`.

An adapter knows how to launch its server (argv list + environment, never a shell string), when it
is ready, how to empty its prefix cache, which extra request fields force outputs, and how its
Prometheus metrics map onto the canonical counters of DESIGN.md. A counter the engine does not
expose maps to None, never 0.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CANONICAL_COUNTERS", "LaunchSpec", "EngineAdapter"]

# Canonical per-run counters (deltas between the scrape at replay start and at replay end).
CANONICAL_COUNTERS = (
    "prompt_tokens",
    "output_tokens",
    "device_hit_tokens",
    "host_restore_tokens",
    "computed_prefill_tokens",
    "host_write_tokens",
    "host_evicted_tokens",
    "preemptions",
)


@dataclass(frozen=True)
class LaunchSpec:
    """How to start one server process: argv list, extra environment, readiness path."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    health_path: str = "/health"
    ready_timeout_s: float = 600.0


@dataclass(frozen=True)
class EngineAdapter:
    """One serving engine. Functions take plain values so adapters stay testable without a server.

    - `launch(options, host, port)` -> LaunchSpec, or None when nothing is launched (sim, external).
    - `request_extras(max_tokens, forced_output_ids)` -> extra JSON fields for /v1/completions.
    - `map_counters(samples)` -> canonical counters from parsed metrics, a {name: {labels-tuple: value}}
      mapping of cumulative sample values (see replay.metrics); missing counters are None.
    - `reset_path`: HTTP path that empties the prefix cache (POST), or None.
    - `forcing`: whether the adapter can force the recorded output ids exactly.
    """

    name: str
    launch: Callable[[Mapping[str, Any], str, int], LaunchSpec | None]
    request_extras: Callable[[int, list[int] | None], dict[str, Any]]
    map_counters: Callable[[Mapping[str, Mapping[tuple, float]]], dict[str, float | None]]
    reset_path: str | None = None
    forcing: bool = False
    metrics_path: str = "/metrics"
    description: str = ""
