"""llama.cpp server adapter: the project's real host-memory KV tier on CPU (`--cache-ram MiB`).

Checked against the server embedded in `xllamacpp==2026.10.11549` and the llama.cpp tree vendored
in `llama_cpp_python==0.3.36` (captures in tests/fixtures/metrics/llamacpp-*.txt).

How the tier works (what `replay.model.wholeprompt` reproduces): each slot keeps the KV of its
last prompt (+ generated tokens). With `--cache-ram` > 0 the server copies idle slots' KV into a
RAM list of whole-prompt entries, moves the best-matching entry back into the slot a new request
takes (the entry leaves the list), and evicts the oldest entries when the MiB limit is reached.

Metrics: `llamacpp:prompt_tokens_total` counts prompt tokens *computed* (cached ones excluded) and
`llamacpp:prompt_tokens_cached_total` counts reused ones; their sum is the prompt. No counter says
whether a reused token came from the slot itself or from RAM, so `device_hit_tokens` and
`host_restore_tokens` are None here; docs/llamacpp.md describes how a sweep attributes them (the
`cache_ram_mib = 0` baseline, and the whole-prompt model replayed on the observed call order).
Host writes and evictions are only logged, never counted: None as well.

Options (TOML `[engine]`): model ("tiny" = the project's tiny GGUF, written on first use, or a
GGUF path), server_bin (a `llama-server` binary; default: the xllamacpp wheel via
`replay.engines.llamacpp_runner`), python, slots, ctx_tokens, cache_ram_mib (or host_tier_gib),
threads, http_threads, batch_tokens, vocab, model_dir, extra_args (binary mode), env,
ready_timeout_s.

HTTP threads: llama-server serves each open keep-alive connection on one thread until it has
been idle for 5 s. Its default (slots + 4 fixed threads, more spawned on demand) once left a
seventh connection unanswered for 5.1 s; a replay holds one connection per agent and a sweep adds
its scraper, so `http_threads` (default 64, `--threads-http`) starts enough fixed threads. Raise it
for pools near 60 (docs/llamacpp.md).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from replay.counters import COMPUTED_PREFILL_TOKENS, Samples
from replay.engines.base import EngineAdapter, LaunchSpec
from replay.engines.common import LAUNCH_OPTIONS, extra_args, extra_env
from replay.errors import ConfigError
from replay.metrics.counters import sample_sum

__all__ = [
    "ADAPTER",
    "LLAMACPP_OPTIONS",
    "launch",
    "map_counters",
    "request_extras",
    "cache_ram_mib",
    "KV_BYTES_PER_TOKEN_TINY",
    "STATE_META_BYTES_PER_TOKEN",
    "STATE_OVERHEAD_BYTES",
    "SERVICE_SPEED_BAND",
    "predict_points",
    "wholeprompt_prediction",
]

LLAMACPP_OPTIONS = LAUNCH_OPTIONS | {
    "server_bin",
    "slots",
    "ctx_tokens",
    "cache_ram_mib",
    "host_tier_gib",
    "threads",
    "http_threads",
    "batch_tokens",
    "vocab",
    "model_dir",
    "state_bytes_per_token",
}

# One token of the tiny model's KV (f16 K and V, 2 layers x 256): see gguf_tiny.kv_bytes_per_token.
# The xllamacpp wheel the adapter is checked against (pyproject.toml's `llamacpp` extra pins it).
PINNED_WHEEL = "2026.10.11549"

KV_BYTES_PER_TOKEN_TINY = 2048
# A saved slot state also stores each cell's position and sequence ids: 1003 tokens measured
# 1.971 MiB in the server's eviction log line, i.e. 2060.6 bytes/token for 2048 bytes of KV.
STATE_META_BYTES_PER_TOKEN = 12

# Per saved state: stream count, cell count, v_trans flag, layer count (4 x 4 bytes) and a type +
# row-size header per layer for K and V (2 x 2 x 12 bytes): 64 bytes for the tiny model. With
# 2060 bytes/token this reproduces the server's per-call cached tokens exactly (tests/real).
STATE_OVERHEAD_BYTES = 64
# The prediction's service-speed band: the a-priori call order depends on how fast the server is
# on the machine at hand, so predictions are also made at these multiples of the idle-machine rate.
SERVICE_SPEED_BAND = (0.25, 0.5, 1.0, 2.0)


def _where() -> str:
    return "engine llamacpp"


def _int_option(options: Mapping[str, Any], key: str, default: int, minimum: int) -> int:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(
            _where(), f"engine.{key}", f"must be an integer >= {minimum}, got {value!r}"
        )
    return value


def cache_ram_mib(options: Mapping[str, Any]) -> int:
    """`--cache-ram` in MiB: `cache_ram_mib`, else `host_tier_gib` x 1024 (the sweeps' generic host
    tier knob), else 0 (off). Whole MiB, as the server takes it."""
    if options.get("cache_ram_mib") is not None:
        value = options["cache_ram_mib"]
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ConfigError(
                _where(), "engine.cache_ram_mib", f"must be a number >= 0, got {value!r}"
            )
        if float(value) != int(value):
            raise ConfigError(_where(), "engine.cache_ram_mib", f"must be whole MiB, got {value!r}")
        return int(value)
    gib = options.get("host_tier_gib")
    if gib is None:
        return 0
    if isinstance(gib, bool) or not isinstance(gib, int | float) or gib < 0:
        raise ConfigError(_where(), "engine.host_tier_gib", f"must be a number >= 0, got {gib!r}")
    mib = float(gib) * 1024
    if abs(mib - round(mib)) > 1e-6:  # two tiers would launch one server under two names
        raise ConfigError(
            _where(), "engine.host_tier_gib",
            f"{gib!r} GiB is {mib:g} MiB; llama.cpp's --cache-ram takes whole MiB (GiB = MiB / "
            "1024, e.g. 0.00390625 for 4 MiB)",
        )  # fmt: skip
    return int(round(mib))


_DEFAULTS = {
    "slots": 2,
    "ctx_tokens": 16384,
    "threads": 1,
    "http_threads": 64,
    "batch_tokens": 2048,
    "vocab": 8192,
}
_MINIMA = {
    "slots": 1,
    "ctx_tokens": 64,
    "threads": 1,
    "http_threads": 1,
    "batch_tokens": 1,
    "vocab": 512,
}
_RUNNER_FLAGS = {
    "slots": "--slots",
    "ctx_tokens": "--ctx-tokens",
    "threads": "--threads",
    "http_threads": "--http-threads",
    "batch_tokens": "--batch-tokens",
    "vocab": "--vocab",
}


def launch(options: Mapping[str, Any], host: str, port: int) -> LaunchSpec:
    """The runner's argv (wheel by default; `server_bin` makes the runner exec llama-server).

    One thread by default: ggml's workers spin while they wait for each other, which collapses on
    a shared 2-core machine (docs/llamacpp.md)."""
    model = str(options.get("model") or "tiny")
    python = str(options.get("python") or sys.executable)
    argv = [python, "-m", "replay.engines.llamacpp_runner", "--model", model]
    argv += ["--host", host, "--port", str(port)]
    for key, flag in _RUNNER_FLAGS.items():
        argv += [flag, str(_int_option(options, key, _DEFAULTS[key], _MINIMA[key]))]
    argv += ["--cache-ram-mib", str(cache_ram_mib(options))]
    if options.get("model_dir"):
        argv += ["--model-dir", str(options["model_dir"])]
    server_bin = options.get("server_bin")
    extra = extra_args(options, "llamacpp")
    if extra and not server_bin:  # the wheel's server takes its settings, not a command line
        raise ConfigError(
            "engine llamacpp",
            "engine.extra_args",
            "applies only with server_bin (a llama-server binary); the xllamacpp wheel takes "
            "no command-line arguments, so they would be dropped",
        )
    argv += [f"--extra={arg}" for arg in extra]
    if server_bin:
        argv += ["--server-bin", str(server_bin)]
    return LaunchSpec(
        argv=argv,
        env=extra_env(options, "llamacpp"),
        health_path="/health",
        ready_timeout_s=float(options.get("ready_timeout_s", 120)),
        # the wheel binds any free port and says which; a binary gets the port it is given
        ready_file_flag=None if server_bin else "--ready-file",
    )


def request_extras(max_tokens: int, forced_output_ids: list[int] | None) -> dict[str, Any]:
    """Exact length forcing: `max_tokens` (llama.cpp's n_predict) with `ignore_eos`.

    llama.cpp has no per-position token forcing (logit_bias is the same at every step, grammars
    constrain text, not ids), so recorded output ids are not forced: the server's own tokens end
    each slot entry, and the next call of a task matches only up to the end of its previous prompt
    (further only where the server happened to sample the recorded ids).
    `cache_prompt` is the server's default, sent anyway so that a changed default cannot turn the
    tier off silently.
    """
    return {"max_tokens": max_tokens, "ignore_eos": True, "cache_prompt": True}


def map_counters(samples: Samples) -> dict[str, float | None]:
    """llama.cpp metrics -> canonical counters (None where the server does not say).

    - prompt_tokens = prompt_tokens_total (computed) + prompt_tokens_cached_total (reused)
    - computed_prefill_tokens = prompt_tokens_total
    - cached_tokens = prompt_tokens_cached_total (slot + RAM tier together; extra key)
    - output_tokens = tokens_predicted_total
    """
    computed = sample_sum(samples, "llamacpp:prompt_tokens_total")
    cached = sample_sum(samples, "llamacpp:prompt_tokens_cached_total")
    prompt = None if computed is None or cached is None else computed + cached
    return {
        "prompt_tokens": prompt,
        "output_tokens": sample_sum(samples, "llamacpp:tokens_predicted_total"),
        "device_hit_tokens": None,
        "host_restore_tokens": None,
        COMPUTED_PREFILL_TOKENS: computed,
        "host_write_tokens": None,
        "host_evicted_tokens": None,
        "preemptions": None,
        "cached_tokens": cached,
        "prompt_seconds": sample_sum(samples, "llamacpp:prompt_seconds_total"),
        "decode_calls": sample_sum(samples, "llamacpp:n_decode_total"),
    }


def version_argv(options: Mapping[str, Any]) -> list[str]:
    if options.get("server_bin"):
        return [str(options["server_bin"]), "--version"]
    python = str(options.get("python") or sys.executable)
    return [python, "-c", "import xllamacpp; print('xllamacpp', xllamacpp.__version__)"]


def _state_bytes_per_token(options: Mapping[str, Any]) -> float | None:
    if options.get("state_bytes_per_token") is not None:
        return float(options["state_bytes_per_token"])
    if str(options.get("model") or "tiny") == "tiny":
        return float(KV_BYTES_PER_TOKEN_TINY + STATE_META_BYTES_PER_TOKEN)
    return None


def predict_points(
    trace: Any, resolved: list[tuple[str, Mapping[str, Any], Mapping[str, Any]]]
) -> dict:
    """The whole-prompt model's prediction for sweep points that differ only in `--cache-ram`.

    `resolved`: (engine, options, run) per point, as `Experiment.resolve` gives them. Returns
    {"inputs": ..., "prediction": {"tiers": [...], ...}} in the shape `replay report` reads, or
    {"inputs": ..., "skipped": why} when the model's bytes per token are unknown (a GGUF other than
    the tiny one needs `state_bytes_per_token`).
    """
    _, options, run = resolved[0]
    slots = _int_option(options, "slots", _DEFAULTS["slots"], _MINIMA["slots"])
    ctx_tokens = _int_option(options, "ctx_tokens", _DEFAULTS["ctx_tokens"], _MINIMA["ctx_tokens"])
    return wholeprompt_prediction(
        trace,
        run,
        slots=slots,
        ctx_tokens=ctx_tokens,
        state_bytes_per_token=_state_bytes_per_token(options),
        mibs=sorted({cache_ram_mib(o) for _, o, _ in resolved}),
    )


def wholeprompt_prediction(
    trace: Any,
    run: Mapping[str, Any],
    *,
    slots: int,
    ctx_tokens: int,
    state_bytes_per_token: float | None,
    mibs: list[int],
) -> dict:
    """The whole-prompt model's `predict_points` document for `slots` server slots and these
    `--cache-ram` sizes, the closed loop paced by the `run` options (also the simulator's
    llama.cpp personality's prediction: `replay.engines.sim_engines`); a `skipped` one when the
    state's bytes a token are unknown (a GGUF other than the tiny one)."""
    from replay.model.wholeprompt_loop import (
        CpuService,
        halfway_mib,
        predict_cache_ram,
        saturation_mib,
    )

    pool = int(run["pool"])
    gap_scale = float(run.get("gap_scale", 1.0))
    truncate = run.get("truncate_prompt_tokens")
    bpt = state_bytes_per_token
    inputs = {"pool": pool, "slots": slots, "gap_scale": gap_scale, "bytes_per_token": bpt}
    if bpt is None:
        return {"inputs": inputs, "skipped": "set engine.state_bytes_per_token for this GGUF"}
    common: dict[str, Any] = dict(
        pool=pool,
        slots=slots,
        bytes_per_token=bpt,
        entry_overhead_bytes=STATE_OVERHEAD_BYTES,
        gap_scale=gap_scale,
        truncate_tokens=truncate,
    )
    rows = predict_cache_ram(trace, cache_ram_mib=mibs, ctx_tokens=ctx_tokens, **common)
    sat, floor, off = saturation_mib(trace, **common)
    base = CpuService()
    band: dict[str, list] = {"speed": [], "halfway_mib": [], "saturation_mib": [], "curves": []}
    grid = list(range(0, max(sat, max(mibs)) + 2))
    for speed in SERVICE_SPEED_BAND:
        svc = CpuService(
            overhead_s=base.overhead_s / speed,
            prefill_tokens_per_s=base.prefill_tokens_per_s * speed,
            decode_tokens_per_s=base.decode_tokens_per_s * speed,
        )
        curve = predict_cache_ram(trace, cache_ram_mib=grid, service=svc, **common)
        computed = [r[COMPUTED_PREFILL_TOKENS] for r in curve]
        band["speed"].append(speed)
        band["halfway_mib"].append(halfway_mib(grid, computed))
        band["saturation_mib"].append(saturation_mib(trace, service=svc, **common)[0])
        band["curves"].append(computed)
    tiers = []
    for r in rows:
        mib = r["cache_ram_mib"]
        k = grid.index(mib)
        lo = min(c[k] for c in band["curves"])
        hi = max(c[k] for c in band["curves"])
        tiers.append(
            {
                "host_tier_gib": mib / 1024,
                "cache_ram_mib": mib,
                COMPUTED_PREFILL_TOKENS: r[COMPUTED_PREFILL_TOKENS],
                "computed_prefill_band": [lo, hi],
                "cached_tokens": r["cached_tokens"],
                "device_hit_tokens": r["device_hit_tokens"],
                "host_restore_tokens": r["host_restore_tokens"],
                "host_write_tokens": r["host_write_tokens"],
                "host_evicted_tokens": r["host_evicted_tokens"],
            }
        )
    prediction = {
        "model": "llamacpp-wholeprompt",
        "order": "closed-loop (virtual time, CpuService)",
        "pool": pool,
        "slots": slots,
        "calls": len(trace),
        "prompt_tokens": trace.prompt_tokens,
        "bytes_per_token": bpt,
        "entry_overhead_bytes": STATE_OVERHEAD_BYTES,
        "working_set_gib": sat / 1024,
        "saturation_mib": sat,
        "computed_prefill_floor": floor,
        "computed_prefill_tier_off": off,
        "halfway_mib": halfway_mib(grid, band["curves"][SERVICE_SPEED_BAND.index(1.0)]),
        "band": {k: v for k, v in band.items() if k != "curves"},
        "band_grid_mib": grid,
        "band_curves": band["curves"],
        "tiers": tiers,
    }
    return {"inputs": inputs, "prediction": prediction}


ADAPTER = EngineAdapter(
    name="llamacpp",
    launch=launch,
    request_extras=request_extras,
    map_counters=map_counters,
    reset_path=None,
    forcing=False,
    # max_tokens 0 still generates one token (xllamacpp 2026.10.11549, measured by
    # tests/real/test_llamacpp_server.py): ask for it, so the row's lengths agree
    min_max_tokens=1,
    description="llama.cpp server on CPU; host tier = --cache-ram MiB (whole-prompt RAM entries)",
    version_argv=version_argv,
    option_names=LLAMACPP_OPTIONS,
    # whole-prompt RAM entries, not blocks: the tier model does not apply
    predict=predict_points,
)
