"""What an engine adapter is: data plus a few small functions. Registered in `replay.engines.ENGINES`.

An adapter knows how to launch its server (argv list + environment, never a shell string), when it
is ready, how to empty its prefix cache, which extra request fields force outputs, and how its
Prometheus metrics map onto the canonical counters of `replay.counters` (docs/architecture.md). A
counter the engine does not expose maps to None, never 0.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from replay.counters import Samples

__all__ = [
    "LaunchSpec",
    "EngineAdapter",
    "openai_extras",
    "no_verify",
    "gpus_per_tp",
    "ONE_CPU",
]


@dataclass(frozen=True)
class LaunchSpec:
    """How to start one server process: argv list, extra environment, readiness path.

    `ready_file_flag`: when set (e.g. "--ready-file"), the server is started on port 0 with
    `[flag, PATH]` appended and announces the port it bound by writing it into PATH; the lifecycle
    reads it from there. Otherwise the server binds the port given to `launch`.
    """

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    health_path: str = "/health"
    ready_timeout_s: float = 600.0
    ready_file_flag: str | None = None


def openai_extras(max_tokens: int, forced_output_ids: list[int] | None) -> dict[str, Any]:
    """Extra body fields that make an OpenAI-compatible server produce exactly `max_tokens` tokens.

    vLLM, SGLang and the simulator accept `min_tokens` and `ignore_eos` on /v1/completions;
    together with `max_tokens` they pin the output length. llama.cpp has no `min_tokens` (its
    `tools/server/server-schema.cpp` at llama_cpp_python 0.3.36 takes `n_predict`/`max_tokens`
    and `ignore_eos`, and ignores unknown fields), so its adapter sends its own fields.
    """
    return {"max_tokens": max_tokens, "min_tokens": max_tokens, "ignore_eos": True}


def no_verify(samples: Samples, options: Mapping[str, Any]) -> list[str]:
    """Default configuration check: the engine reports nothing to compare against."""
    return []


# What one run of an engine that computes on the host asks a cluster for: a slot of one CPU.
ONE_CPU: dict[str, float] = {"CPU": 1.0}


def gpus_per_tp(options: Mapping[str, Any]) -> dict[str, float]:
    """Resources of a run of a GPU engine: one GPU per tensor-parallel rank, all on one node (the
    driver talks to the server over loopback, so a run never spans nodes)."""
    return {"GPU": float(int(options.get("tp") or 1))}


@dataclass(frozen=True)
class EngineAdapter:
    """One serving engine. Functions take plain values so adapters stay testable without a server.

    - `launch(options, host, port)` -> LaunchSpec, or None when nothing is launched (sim, external).
    - `request_extras(max_tokens, forced_output_ids)` -> extra JSON fields for /v1/completions.
    - `map_counters(samples)` -> canonical counters from parsed metrics, a {name: {labels-tuple: value}}
      mapping of cumulative sample values (see replay.metrics); missing counters are None.
    - `reset_path`: HTTP path that empties the prefix cache (POST), or None.
    - `forcing`: whether the adapter can force the recorded output ids exactly.
    - `min_max_tokens`: the smallest `max_tokens` the server accepts. A call recorded with fewer
      output tokens (a prefill-only call: two in the WEKA set) asks for this many instead, and
      its row says so; 0 sends every call as recorded.
    - `verify(samples, options)` -> problems (strings) where the running server reports a
      configuration that differs from the options it was launched with (e.g. vLLM's
      `cache_config_info` labels); empty when it matches or cannot be checked.
    - `version_argv(options)` -> argv that prints the engine's version, or None.
    - `option_names`: the engine options this adapter understands (None: any); the sweep rejects
      others with an error naming the field.
    - `in_process`: runs inside the replay process (the simulator): no server, no scraping.
    - `metrics_lag_s`: how long after its work the engine's /metrics may still not count it
      (LMCache adds its counts every 10 s); the end scrape (and a sweep's start scrape, after
      its warm-up) waits that long first.
    - `sends_task_id`: runs default to sending each request's task identity in
      `kv_transfer_params` (`RunOptions.efficientagent_task_id`), for a KV connector that reads it.

    Hooks the sweep calls instead of branching on engine names:

    - `options_type`: a dataclass whose fields are this engine's typed options (the simulator's
      SimConfig); the sweep checks values against its field types, builds it (its range checks),
      and takes unset prediction inputs from its defaults.
    - `check_options(options)`: raises ConfigError for options this engine cannot run with;
      by default a launched engine builds its launch spec (which checks them), others accept.
    - `server_url(options)`: the already running server to replay against (nothing launched).
    - `personality(options)`: the adapter whose metrics, reset path and request fields apply
      (an external server speaks for whichever engine it is).
    - `predict(trace, resolved)`: this engine's own working-set prediction for points that differ
      only in the host tier (`resolved`: (engine, options, run) per point); None (as the hook or
      as what it returns for these options): the tier model.
    - `resources(options)`: what one run asks a cluster scheduler for (`{"GPU": tp}` for a GPU
      engine); None: one CPU, for engines that compute on the host (the simulator, llama.cpp).
    - `seed_per_repeat`: the sweep adds the repeat index to the `seed` option, so an engine
      with seeded noise (the simulator's jitter) gives repeats that differ.
    """

    name: str
    launch: Callable[[Mapping[str, Any], str, int], LaunchSpec | None]
    request_extras: Callable[[int, list[int] | None], dict[str, Any]]
    map_counters: Callable[[Samples], dict[str, float | None]]
    reset_path: str | None = None
    forcing: bool = False
    min_max_tokens: int = 0
    metrics_path: str = "/metrics"
    metrics_lag_s: float = 0.0
    description: str = ""
    verify: Callable[[Samples, Mapping[str, Any]], list[str]] = no_verify
    version_argv: Callable[[Mapping[str, Any]], list[str] | None] | None = None
    option_names: frozenset[str] | None = None
    in_process: bool = False
    seed_per_repeat: bool = False
    sends_task_id: bool = False
    options_type: type | None = None
    check_options: Callable[[Mapping[str, Any]], None] | None = None
    server_url: Callable[[Mapping[str, Any]], str] | None = None
    personality: Callable[[Mapping[str, Any]], EngineAdapter] | None = None
    predict: (
        Callable[[Any, list[tuple[str, Mapping[str, Any], Mapping[str, Any]]]], dict | None] | None
    ) = None
    resources: Callable[[Mapping[str, Any]], dict[str, float]] | None = None

    def check(self, options: Mapping[str, Any]) -> None:
        """Raise ConfigError when this engine cannot run with `options` (before any launch)."""
        if self.check_options is not None:
            self.check_options(options)
        elif not self.in_process and self.server_url is None:
            self.launch(options, "127.0.0.1", 8000)

    def speaking_for(self, options: Mapping[str, Any]) -> EngineAdapter:
        """The adapter whose metrics, reset path and request fields a run with `options` uses."""
        return self if self.personality is None else self.personality(options)

    def needs(self, options: Mapping[str, Any]) -> dict[str, float]:
        """The cluster resources one run with `options` needs (see `resources`)."""
        return dict(ONE_CPU) if self.resources is None else self.resources(options)
