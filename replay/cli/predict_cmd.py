"""`replay predict`: working-set predictions (trace-driven, closed form, economics, sessions)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import click
import numpy as np
import orjson
from click.core import ParameterSource

from replay.cli.out_file import check_outside, check_plain_file
from replay.cli.predict_print import (
    print_closed_form,
    print_economics,
    print_sessions,
    print_tiers,
)
from replay.driver.options import MAX_GAP_SCALE, TIMINGS
from replay.errors import ConfigError
from replay.model.closed_form import closed_form
from replay.model.economics import economics_table
from replay.model.order import ServiceModel
from replay.model.presets import GIB, MAX_TIER_GIB, get_hardware, get_model
from replay.model.run_order import parse_order
from replay.model.session import ACCESS, session_curve, turn_prices
from replay.trace.validate import MAX_CALL_TOKENS

WHERE = "predict"
# Upper bounds on what the options may say: past them a number is a typo, and one past 2**63
# ended in a traceback where the JSON was written (orjson holds 64-bit integers) or a count was
# taken of it. Tokens of one prompt, prefix or session: a call's limit (MAX_CALL_TOKENS).
MAX_POOL = 1 << 20  # task slots
MAX_TP = 1 << 10  # tensor-parallel ranks
MAX_DEVICE_TOKENS = 1 << 50  # a PiB of KV at one byte a token
MAX_BYTES_PER_TOKEN = float(GIB)  # KV bytes per token per rank: real models take under a MiB
# the session curve is computed one session count at a time: 10^8 took minutes and tens of GB
MAX_SESSIONS = 10_000
INT64_MAX = (1 << 63) - 1  # the model's token and chunk counts are int64


def _numbers(kind, text: str | None, name: str, maximum: float = math.inf) -> list:
    if text is None or not text.strip():
        return []
    try:
        values = [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(
            f"expected comma-separated numbers, got {text!r}", param_hint=name
        ) from None
    if any(math.isnan(v) for v in values):  # said "values must be >= 0"
        raise click.BadParameter("nan is not a number", param_hint=name)
    if not all(v >= 0 for v in values):
        raise click.BadParameter("values must be >= 0", param_hint=name)
    if not all(v <= maximum for v in values):
        raise click.BadParameter(f"values must be at most {maximum:,}", param_hint=name)
    return values


def _require(value, flag: str, mode: str):
    if value is None:
        raise ConfigError(WHERE, flag, f"required with {mode}")
    return value


def _check_numbers(o: dict) -> None:
    """Refuse NaN, inf and past-any-model sizes where a count or a size is meant (nan reached
    int() and raised; inf or 1e300 printed a working set of inf GiB), and an efficiency outside
    (0, 1] (0 was taken as unset)."""
    bounds = (("bytes_per_token", "--bytes-per-token", MAX_BYTES_PER_TOKEN),
              ("mean_prompt_tokens", "--mean-prompt-tokens", MAX_CALL_TOKENS))  # fmt: skip
    for key, flag, most in bounds:
        v = o.get(key)
        if v is not None and not 0 < v < math.inf:
            raise ConfigError(WHERE, flag, f"must be a finite number > 0, got {v}")
        if v is not None and v > most:  # (A-1)*N*beta came out inf GiB
            raise ConfigError(WHERE, flag, f"must be at most {most:,.0f}, got {v:g}")
    e = o.get("efficiency")
    if e is not None and not 0 < e <= 1:
        raise ConfigError(WHERE, "--efficiency", f"must be in (0, 1], got {e}")


# The options each mode reads (besides --json and -o). One given on the command line that the
# chosen mode does not read is refused: it passed silently, and the user took it as applied.
_MODE_OPTIONS = {
    "trace": {"trace_path", "pool", "model", "tp", "bytes_per_token", "tiers_gib", "chunk_tokens",
              "block_tokens", "device_gib", "device_tokens", "order", "no_pays", "queue",
              "ranges", "hardware", "efficiency", "gap_scale", "timing"},
    "closed-form": {"pool", "mean_prompt_tokens", "trace_path", "bytes_per_token", "model", "tp",
                    "tiers_gib"},
    "economics": {"model", "tp", "hardware", "prefix_tokens", "efficiency", "attention"},
    "sessions": {"model", "hardware", "tp", "efficiency", "attention", "session_tokens",
                 "device_gib", "host_gib", "max_sessions", "access"},
}  # fmt: skip
# the closed loop's service times and pacing: --order pool
_POOL_ORDER_ONLY = ("queue", "ranges", "hardware", "efficiency", "gap_scale", "timing")
_MODE_FLAGS = {"trace": "--trace", "closed-form": "--closed-form", "economics": "--economics",
               "sessions": "--sessions"}  # fmt: skip


def _mode(o: dict) -> str:
    """The one mode flag given (trace-driven when none); two are refused (the last one won)."""
    modes = [m for m in ("closed-form", "economics", "sessions") if o.pop(m.replace("-", "_"))]
    if len(modes) > 1:
        given = " and ".join(_MODE_FLAGS[m] for m in modes)
        raise ConfigError(WHERE, given, "give one mode: each predicts something else")
    return modes[0] if modes else "trace"


def _check_mode_options(ctx: click.Context, mode: str, order: str) -> None:
    """Refuse an option the chosen mode (or, predicting from a trace, its order) would ignore."""
    used = _MODE_OPTIONS[mode]
    for param in ctx.command.params:
        name = param.name
        if name is None or name in ("as_json", "out") or name.replace("_", "-") in _MODE_FLAGS:
            continue
        if ctx.get_parameter_source(name) != click.core.ParameterSource.COMMANDLINE:
            continue
        flag = max(param.opts, key=len)
        if name not in used:
            where = [_MODE_FLAGS[m] for m, names in _MODE_OPTIONS.items() if name in names]
            raise ConfigError(
                WHERE, flag, f"not read by {_MODE_FLAGS[mode]} predictions; it is for "
                f"{' or '.join(where)}",
            )  # fmt: skip
        if mode == "trace" and name in _POOL_ORDER_ONLY and order != "pool":
            raise ConfigError(
                WHERE, flag, f"applies to --order pool (the closed loop's service times), not "
                f"--order {order}",
            )  # fmt: skip
        if mode == "trace" and name == "efficiency" and ctx.params.get("hardware") is None:
            raise ConfigError(WHERE, flag, "scales the service times --hardware gives; add it")


def _check_one_source(ctx: click.Context, o: dict, mode: str) -> None:
    """Refuse two options that give one number, where one of them was silently dropped."""

    def given(name: str) -> bool:
        return ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE

    if mode == "closed-form" and given("trace_path") and given("mean_prompt_tokens"):
        raise ConfigError(
            WHERE, "--trace and --mean-prompt-tokens", "both give the closed form's mean prompt "
            "(the trace's, or the number): give one",
        )  # fmt: skip
    if given("device_gib") and given("device_tokens"):
        raise ConfigError(
            WHERE, "--device-gib and --device-tokens", "both size the device (in GiB per rank, "
            "or in tokens): give one",
        )  # fmt: skip


def _check_order(order: str) -> None:
    """`pool`, `trace` or `run:DIR` with a directory (`run:` read the current directory)."""
    if order in ("pool", "trace"):
        return
    if not order.startswith("run:"):
        raise ConfigError(WHERE, "--order", f"unknown order {order!r}; valid: pool, trace, run:DIR")
    if not order[4:].strip():
        raise ConfigError(
            WHERE, "--order", f"{order!r} names no run directory: give run:DIR, the directory of "
            "a recorded run (its calls.parquet or calls.jsonl)",
        )  # fmt: skip


def _bytes_per_token(bytes_per_token: float | None, model: str | None, tp: int, mode: str) -> float:
    if bytes_per_token is not None:  # in (0, inf): `_check_numbers` saw to it
        return bytes_per_token
    if model is None:
        raise ConfigError(WHERE, "--model", f"give --model (and --tp) or --bytes-per-token {mode}")
    return float(get_model(model).bytes_per_token(tp))


def _emit(doc: dict, as_json: bool, out: str | None, human) -> None:
    text = orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
    if out:
        from replay.sweep.results import write_bytes_atomic

        # its temp file goes on a failed write (a full disk left one), the error names -o
        write_bytes_atomic(Path(out), text + b"\n")
    if as_json:
        sys.stdout.write(text.decode() + "\n")
    else:
        human(doc)


@click.command(name="predict")
@click.option("--closed-form", "closed_form", is_flag=True, help="Closed form (A-1)*N*beta.")
@click.option("--economics", "economics", is_flag=True, help="Offload economics per hardware.")
@click.option("--sessions", "sessions", is_flag=True, help="The explainer's session model.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False), help="Trace file.")
@click.option("--pool", type=click.IntRange(1, MAX_POOL), help="Active pool A (task slots).")
@click.option("--model", help="Model preset (bytes per token, FLOPs).")
@click.option(
    "--tp",
    type=click.IntRange(1, MAX_TP),
    default=1,
    show_default=True,
    help="Tensor-parallel ranks.",
)
@click.option(
    "--bytes-per-token", type=float, help="KV bytes per token per rank (overrides --model)."
)
@click.option("--tiers-gib", default="0,5,10,20,40,80", show_default=True, help="Host tier sizes.")
@click.option(
    "--chunk-tokens",
    type=click.IntRange(1, MAX_CALL_TOKENS),
    default=256,
    show_default=True,
    help="Host chunk size.",
)
@click.option(
    "--block-tokens",
    type=click.IntRange(1, MAX_CALL_TOKENS),
    default=16,
    show_default=True,
    help="Device block size.",
)
@click.option(
    "--device-gib", type=float, default=0.0, show_default=True, help="Device KV per rank."
)
@click.option(
    "--device-tokens",
    type=click.IntRange(0, MAX_DEVICE_TOKENS),
    help="Device KV in tokens (instead of --device-gib).",
)
@click.option(
    "--order",
    default="pool",
    show_default=True,
    help="Reference order: pool (closed loop of --pool slots), trace, or run:DIR (a recorded run).",
)
@click.option(
    "--gap-scale",
    type=click.FloatRange(0, MAX_GAP_SCALE),
    default=1.0,
    show_default=True,
    help="Pool order: the run's --gap-scale (when calls are sent decides their order).",
)
@click.option(
    "--timing",
    type=click.Choice(TIMINGS),
    default="think",
    show_default=True,
    help="Pool order: the run's --timing.",
)
@click.option("--no-pays", is_flag=True, help="Skip the search for where offload starts paying.")
@click.option("--queue", is_flag=True, help="Pool order: calls queue in the engine (model.md).")
@click.option("--ranges", is_flag=True, help="Pool order, --hardware: low/high per quantity.")
@click.option("--mean-prompt-tokens", type=float, help="Closed form: mean prompt N (else trace).")
@click.option(
    "--hardware",
    help="Economics: comma-separated presets (default all); sessions: one; trace mode: the "
    "service times of --order pool come from this card and --model.",
)
@click.option("--prefix-tokens", default="1024,8192,32768,131072", show_default=True)
@click.option(
    "--efficiency",
    type=float,
    help="Fraction of peak FLOP/s (and HBM bandwidth) achieved: default 1.0 for economics and "
    "sessions, 0.6 (the simulator's) for the service times of --order pool with --hardware.",
)
@click.option(
    "--attention/--no-attention",
    default=None,
    help="Count attention FLOPs (default: on for economics, off for sessions as the explainer).",
)
@click.option(
    "--session-tokens",
    type=click.IntRange(1, MAX_CALL_TOKENS),
    help="Sessions: history tokens per session.",
)
@click.option("--host-gib", type=float, default=0.0, show_default=True, help="Sessions: host tier.")
@click.option(
    "--max-sessions",
    type=click.IntRange(1, MAX_SESSIONS),
    default=12,
    show_default=True,
    help="Sessions: the curve runs from 1 to this many sessions.",
)
@click.option("--access", type=click.Choice(ACCESS), default="round-robin", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("-o", "--out", type=click.Path(dir_okay=False), help="Also write the JSON here.")
def command(**o) -> None:
    """Predict computed prefill, restores and writes per host tier before a run.

    \b
    replay predict --trace T --pool 16 --model qwen3-coder-30b-a3b --tp 8 --device-gib 10 \\
        --tiers-gib 0,5,10,20,40,80 --json
    replay predict --closed-form --pool 16 --mean-prompt-tokens 33000 --bytes-per-token 24576 \\
        --tiers-gib 5,10,20 --json
    replay predict --economics --model qwen3-coder-30b-a3b --tp 8
    replay predict --sessions --model llama-3-70b --hardware explainer-4xa100 \\
        --session-tokens 100000 --device-gib 167.6
    """
    mode = _mode(o)
    ctx = click.get_current_context()
    _check_mode_options(ctx, mode, o["order"])
    _check_one_source(ctx, o, mode)
    _check_numbers(o)
    if mode == "trace":
        _check_order(o["order"])
    trace_path = o.get("trace_path")
    if o["out"] and trace_path and Path(o["out"]).resolve() == Path(trace_path).resolve():
        raise ConfigError(
            WHERE,
            "-o",
            f"{o['out']!r} is the trace: writing it would replace it; give another file",
        )
    if o["out"]:
        check_plain_file(o["out"], WHERE, "-o")
        if o["order"].startswith("run:") and o["order"][4:]:
            check_outside(o["out"], [o["order"][4:]], WHERE, "-o")  # the run it reads
    tiers = _numbers(float, o["tiers_gib"], "--tiers-gib")
    sizes = [*((t, "--tiers-gib") for t in tiers), (o["device_gib"], "--device-gib")]
    if o.get("host_gib") is not None:
        sizes.append((o["host_gib"], "--host-gib"))
    for gib, flag in sizes:
        if not 0 <= gib <= MAX_TIER_GIB:
            raise click.BadParameter(
                f"tier sizes must be in [0, {MAX_TIER_GIB:,.0f}] GiB, got {gib}", param_hint=flag
            )
    if mode == "closed-form":
        pool = _require(o["pool"], "--pool", "--closed-form")
        bpt = _bytes_per_token(o["bytes_per_token"], o["model"], o["tp"], "with --closed-form")
        mean = o["mean_prompt_tokens"]
        if mean is None:
            path = _require(o["trace_path"], "--mean-prompt-tokens", "--closed-form (or --trace)")
            from replay.trace.io import read_trace

            trace = read_trace(path)
            mean = trace.prompt_tokens / max(1, len(trace))
            pool = _active_agents(pool, len(trace.tasks))
        doc = closed_form(pool, mean, bpt, tiers).to_dict()
        _emit(doc, o["as_json"], o["out"], print_closed_form)
    elif mode == "economics":
        model = get_model(_require(o["model"], "--model", "--economics"))
        names = [h.strip() for h in (o["hardware"] or "").split(",") if h.strip()]
        table = economics_table(
            model,
            _numbers(int, o["prefix_tokens"], "--prefix-tokens", MAX_CALL_TOKENS),
            hardware=[get_hardware(n) for n in names] if names else None,
            tp=o["tp"],
            efficiency=1.0 if o["efficiency"] is None else o["efficiency"],
            attention=True if o["attention"] is None else o["attention"],
        )
        doc = {"model": model.name, "tp": o["tp"], "hardware": [e.to_dict() for e in table]}
        _emit(doc, o["as_json"], o["out"], print_economics)
    elif mode == "sessions":
        model = get_model(_require(o["model"], "--model", "--sessions"))
        hw = get_hardware(_require(o["hardware"], "--hardware", "--sessions"))
        tokens = _require(o["session_tokens"], "--session-tokens", "--sessions")
        prices = turn_prices(
            model,
            hw,
            tokens,
            tp=o["tp"],
            efficiency=1.0 if o["efficiency"] is None else o["efficiency"],
            attention=bool(o["attention"]),
        )
        doc = session_curve(
            o["max_sessions"],
            session_tokens=tokens,
            bytes_per_token=model.bytes_per_token(o["tp"]),
            device_bytes=o["device_gib"] * GIB,
            host_bytes=o["host_gib"] * GIB,
            prices=prices,
            access=o["access"],
        )
        doc |= {"model_preset": model.name, "hardware": hw.name, "tp": o["tp"]}
        _emit(doc, o["as_json"], o["out"], print_sessions)
    else:
        _trace_mode(o, tiers)


def _check_same_trace(run_dir: str, trace) -> None:
    """A run's order predicts only the trace it replayed: one sharing task ids gave a prediction
    for the run's calls under the other trace's name. The run's run.json names its trace by
    sha256 (runs written without it are taken as they are): of its file's bytes, or of the JSONL
    text of a generated one (`trace_sha256`). The same trace stored plain and gzip-compressed,
    or generated by a sweep's `synth`, is one trace: their JSONL text is the same."""
    from replay.analysis.trace_ids import run_provenance
    from replay.driver.run import trace_content_sha256, trace_sha256

    prov = run_provenance(run_dir)
    recorded = prov.get("trace_sha256")
    given = trace_sha256(trace)
    if not recorded or recorded == given:
        return
    text = trace_content_sha256(trace)
    if recorded == text:  # a generated trace, or a plain file `replay trace` wrote
        return
    named = prov.get("trace")  # None: generated, no file
    ran = _recorded_trace(named, recorded)
    if ran is not None and trace_content_sha256(ran) == text:  # the other of plain and gzip
        return
    gone = f"; {named} is not here to compare their text" if named and ran is None else ""
    raise ConfigError(
        WHERE, "--order", f"run:{run_dir} replayed another trace ("
        f"{named or 'generated'}, sha256 {recorded[:12]}...), not {trace.path} (sha256 "
        f"{(given or text)[:12]}..., {text[:12]}... of its text){gone}: give --trace the trace "
        "the run replayed",
    )  # fmt: skip


def _recorded_trace(path: str | None, recorded: str):
    """The trace file a run names, read again where it is still there with the bytes the run
    hashed (None otherwise): a gzip file's bytes hash apart from its text, so the text is
    compared."""
    from replay.errors import TraceError
    from replay.trace.cache import file_sha256
    from replay.trace.io import read_trace

    if not path:
        return None
    try:
        return read_trace(path) if file_sha256(Path(path))[0] == recorded else None
    except TraceError:  # gone, unreadable or no trace now: nothing to compare
        return None


def _active_agents(pool: int, tasks: int) -> int:
    """The most agents a trace of `tasks` tasks has active at once under `pool` slots."""
    if pool > tasks:
        click.echo(
            f"replay: note: the trace has {tasks} tasks, so at most {tasks} are active at once: "
            f"the working set counts {tasks} agents, not --pool {pool}",
            err=True,
        )
    return min(pool, tasks)


def _saturation_note(trace, active: int, device_tokens: int) -> None:
    """The model looks up each call as if its blocks were free to stay: it neither pins a
    running call's blocks nor queues a call the device cannot fit, so where the prompts of the
    `active` agents outgrow the device its hits come out high and its computed prefill low.
    Their 90th percentile, not their mean: a heavy tail of long prompts fills the device where
    the mean does not (a claude-code trace at pool 2: mean 95K, p90 168K, against 218K)."""
    lengths = [c.prompt_len for c in trace.calls]
    p90 = float(np.percentile(lengths, 90)) if lengths else 0.0
    in_flight = int(active * p90)
    if device_tokens and in_flight > device_tokens:
        click.echo(
            f"replay: note: {active} agents' prompts (p90 {p90:,.0f} tokens) can put about "
            f"{in_flight:,} tokens in flight against the device's {device_tokens:,}: the model "
            "does not pin running calls' blocks or queue admission, so where calls overlap that "
            "much it counts device hits high and computed prefill low (docs/model.md: the "
            "paper-scale trace at pool 16 on 10 GiB, 7x low with no host tier); the simulator "
            "(replay run --engine sim) models it",
            err=True,
        )


def _check_tokens_fit(sizes_gib: list[float], bytes_per_token: float) -> None:
    """The tiers' sizes in tokens fit the model's int64 counts: a tiny --bytes-per-token (1e-300)
    put inf tokens in 1 GiB, and taking a count of it raised OverflowError."""
    gib = max(sizes_gib)
    tokens = gib * GIB / bytes_per_token
    if not tokens <= INT64_MAX:
        raise ConfigError(
            WHERE, "--bytes-per-token", f"{bytes_per_token:g} bytes a token puts {tokens:.3g} "
            f"tokens in {gib:g} GiB, past the model's 64-bit counts: give the KV bytes one token "
            "takes on one rank",
        )  # fmt: skip


def _trace_mode(o: dict, tiers: list[float]) -> None:
    from replay.trace.io import read_trace

    path = _require(o["trace_path"], "--trace", "trace-driven predictions")
    pool = _require(o["pool"], "--pool", "--trace")
    bpt = _bytes_per_token(o["bytes_per_token"], o["model"], o["tp"], "with --trace")
    ctx = click.get_current_context(silent=True)
    tp_source = ctx.get_parameter_source("tp") if ctx is not None else None
    if o["bytes_per_token"] is None and tp_source is ParameterSource.DEFAULT:
        # sizes are per rank: at TP 8 (the simulator's default) a rank holds 1/8 of each
        # token's KV, so a tier of one size holds 8x the tokens of this prediction's
        click.echo(
            f"replay: note: --tp {o['tp']} (the default): sizes are per rank with the whole "
            "model's KV on one; give --tp as the run's (the simulator's default is TP 8)",
            err=True,
        )
    _check_tokens_fit([o["device_gib"], *tiers], bpt)
    device_tokens = o["device_tokens"]
    if device_tokens is None:  # --device-gib in [0, MAX_TIER_GIB]: `command` saw to it
        device_tokens = int(math.floor(o["device_gib"] * GIB / bpt))
    if device_tokens == 0:
        click.echo(
            "replay: note: no device tier (--device-gib 0, the default): every prompt token "
            "misses the device, so the host tier sees all reuse; give --device-gib for the run's "
            "device KV per rank (the engine's device_kv_gib)",
            err=True,
        )
    if device_tokens and o["chunk_tokens"] % o["block_tokens"]:  # as the simulator refuses it
        raise ConfigError(
            WHERE, "--chunk-tokens", "must be a multiple of --block-tokens with a device tier"
        )
    service = None
    if o["hardware"]:
        if o["model"] is None:
            raise ConfigError(WHERE, "--model", "--hardware needs --model for service times")
        service = ServiceModel.from_presets(
            get_model(o["model"]),
            get_hardware(o["hardware"]),
            o["tp"],
            0.6 if o["efficiency"] is None else o["efficiency"],
        )
    from replay.model.predict import predict_tiers  # pulls in numba: load only when predicting

    trace = read_trace(path)
    too_long = device_tokens and sum(
        c.prompt_len + c.output_len > device_tokens for c in trace.calls
    )
    if too_long:
        click.echo(
            f"replay: note: {too_long} of {len(trace)} calls need more than the device's "
            f"{device_tokens:,} tokens (prompt + output): an engine refuses them (the "
            "simulator answers 4xx) and a run counts none of their tokens; the model counts "
            "them all",
            err=True,
        )
    _saturation_note(trace, _active_agents(pool, len(trace.tasks)), device_tokens)
    if o["order"].startswith("run:"):
        _check_same_trace(o["order"][4:], trace)
    doc = predict_tiers(
        trace,
        pool=pool,
        bytes_per_token=bpt,
        chunk_tokens=o["chunk_tokens"],
        device_tokens=device_tokens,
        tiers_gib=tiers,
        order=parse_order(o["order"]),
        block_tokens=o["block_tokens"],
        offload_pays=not o["no_pays"],
        service=service,
        queue=o["queue"],
        ranges=o["ranges"],
        gap_scale=o["gap_scale"],
        timing=o["timing"],
    )
    if doc["order"] == "given":
        doc["order"] = o["order"]
    doc |= {
        "trace": str(path),
        "model_preset": o["model"],
        "hardware": o["hardware"],
        "tp": o["tp"],
    }
    _emit(doc, o["as_json"], o["out"], print_tiers)
