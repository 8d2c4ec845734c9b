"""The reference simulator as an engine: `sim` (in process, virtual time) and `sim-server`
(`replay sim serve` as a subprocess on a loopback port, wall-clock paced by `time_scale`).

Options are the simulator's SIMOPTS in TOML spelling (hardware, model, tp, device_kv_gib,
host_tier_gib, admission, kappa, time_scale, seed, ...); `replay.sim.options.SimConfig` validates
them. Metrics of the server are exposed under the `replay_sim:` prefix with canonical names.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from replay.counters import CANONICAL_COUNTERS, Samples
from replay.engines.base import EngineAdapter, LaunchSpec, openai_extras
from replay.engines.common import LAUNCH_OPTIONS, extra_args, extra_env, flag_value
from replay.metrics.counters import first_present, sample_sum
from replay.sim.options import SimConfig

__all__ = ["SIM", "SIM_SERVER", "sim_argv", "map_counters", "PREFIX"]

PREFIX = "replay_sim:"
# Options of the sweep itself, never passed to the simulator as flags.
_NOT_SIMOPTS = LAUNCH_OPTIONS - {"model"}
SIM_OPTIONS = frozenset(SimConfig.__dataclass_fields__)


def sim_argv(options: Mapping[str, Any]) -> list[str]:
    """SIMOPTS as command-line flags: `device_kv_gib = 2` -> `--device-kv-gib 2`; true -> flag."""
    argv: list[str] = []
    for key, value in options.items():
        if key in _NOT_SIMOPTS or value is None:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is False:
            continue
        else:
            argv += [flag, flag_value(value)]
    return argv


def launch_server(options: Mapping[str, Any], host: str, port: int) -> LaunchSpec:
    """`python -m replay.cli.sim_cmd serve --host H --port 0 SIMOPTS --ready-file F`:
    the `replay sim serve` command, started without importing the whole CLI (faster start)."""
    python = str(options.get("python", sys.executable))
    argv = [
        python,
        "-m",
        "replay.cli.sim_cmd",
        "serve",
        "--host",
        host,
        "--port",
        str(port),
    ]
    if options.get("served_model_name"):
        argv += ["--served-model-name", str(options["served_model_name"])]
    argv += sim_argv(options) + extra_args(options, "sim-server")
    return LaunchSpec(
        argv=argv,
        env=extra_env(options, "sim-server"),
        health_path="/health",
        ready_timeout_s=float(options.get("ready_timeout_s", 60)),
        ready_file_flag="--ready-file",
    )


def map_counters(samples: Samples) -> dict[str, float | None]:
    """`replay_sim:<canonical>_total` (or without `_total`) -> canonical counters, one to one;
    then every other `replay_sim:<name>_total` under its own name (chunks written and read,
    declined writes, evicted blocks, requests: what the in-process simulator's counters.json
    holds too). Whole numbers come back as ints, as in process."""
    out: dict[str, float | None] = {
        name: first_present(
            sample_sum(samples, f"{PREFIX}{name}_total"), sample_sum(samples, f"{PREFIX}{name}")
        )
        for name in CANONICAL_COUNTERS
    }
    for metric in samples:
        if metric.startswith(PREFIX) and metric.endswith("_total"):
            name = metric[len(PREFIX) : -len("_total")]
            out.setdefault(name, sample_sum(samples, metric))
    return {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in out.items()}


def predict_personality(
    trace: Any, resolved: list[tuple[str, Mapping[str, Any], Mapping[str, Any]]]
) -> dict | None:
    """The llama.cpp personality's own prediction: the whole-prompt model the personality runs
    (`replay.sim.personality`), with its slots, its state bytes a token and the points' RAM
    tiers. Other personalities: None (the sweep's block tier model)."""
    _, options, run = resolved[0]
    cfg = SimConfig.from_options(**options)
    if cfg.personality != "llamacpp":
        return None
    from replay.engines.llamacpp import wholeprompt_prediction
    from replay.sim.personality import STATE_META_BYTES_PER_TOKEN, cache_ram_mib

    return wholeprompt_prediction(
        trace,
        run,
        slots=cfg.max_num_seqs,
        ctx_tokens=0,  # the personality's RAM tier has no context cap (SlotPersonality)
        state_bytes_per_token=float(cfg.bytes_per_token + STATE_META_BYTES_PER_TOKEN),
        mibs=sorted({cache_ram_mib(SimConfig.from_options(**o)) for _, o, _ in resolved}),
    )


def sim_extras(max_tokens: int, forced_output_ids: list[int] | None) -> dict[str, Any]:
    """OpenAI length forcing plus the simulator's own field carrying the recorded output ids, so the
    KV it caches for the output is the KV the next recorded prompt reuses; and the output's ids
    back (`return_token_ids`, replay/sim/server.py), so that a run counts streamed tokens and
    checks the forcing (`exact_match`) as it does in process, not text chunks."""
    extras = openai_extras(max_tokens, forced_output_ids)
    if forced_output_ids is not None:
        extras["forced_output_ids"] = list(forced_output_ids)
    extras["return_token_ids"] = True
    return extras


SIM = EngineAdapter(
    name="sim",
    launch=lambda options, host, port: None,
    request_extras=openai_extras,
    map_counters=map_counters,
    forcing=True,
    description="reference simulator in process (virtual time: hours of trace in seconds)",
    in_process=True,
    seed_per_repeat=True,
    # in process: no server command line or environment to pass anything else to; and no
    # wall clock for `time_scale` to pace (virtual time), so it is refused, not ignored
    option_names=SIM_OPTIONS - {"time_scale"},
    options_type=SimConfig,
    predict=predict_personality,
)

SIM_SERVER = EngineAdapter(
    name="sim-server",
    launch=launch_server,
    request_extras=sim_extras,
    map_counters=map_counters,
    reset_path="/reset_prefix_cache",
    forcing=True,
    seed_per_repeat=True,
    min_max_tokens=1,  # its server checks max_tokens as vLLM's does (replay.sim.server)
    description="reference simulator behind its OpenAI-compatible HTTP server (subprocess)",
    option_names=SIM_OPTIONS | LAUNCH_OPTIONS,
    options_type=SimConfig,
    predict=predict_personality,
)
