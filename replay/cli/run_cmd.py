"""`replay run`: replay a trace against a server (--url) or the in-process simulator (--engine sim)."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from replay.cli.run_summary import print_summary
from replay.cli.sim_options import sim_options
from replay.driver.options import MAX_TIMER_SPIN_S, ON_ERROR, TIMER_SPIN_S, TIMINGS, RunOptions
from replay.errors import ConfigError

if TYPE_CHECKING:
    from replay.trace.model import Trace


@click.command(name="run")
@click.option(
    "--trace",
    "trace_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="trace file (.jsonl or .jsonl.gz)",
)
@click.option(
    "--trace-cache/--no-trace-cache",
    default=True,
    show_default=True,
    help="keep a parsed copy of a trace of 1 MiB or more, named by the sha256 of its bytes, in "
    "$REPLAY_TRACE_CACHE (a folder, or off) or ~/.cache/replay/traces, and load that copy while "
    "the file's bytes are unchanged (docs/driver.md)",
)
@click.option("--pool", type=int, required=True, help="active pool: task slots running at once")
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="run directory to write (must be empty or new)",
)
@click.option(
    "--force",
    is_flag=True,
    help="clear a non-empty --out that holds an earlier run's files instead of refusing it",
)
@click.option("--url", default=None, help="OpenAI-compatible server, e.g. http://127.0.0.1:8000")
@click.option(
    "--engine-kind",
    default=None,
    help="engine adapter for request extras and /metrics (vllm, sglang, sim-server, external, "
    "...) [default: guessed from the metric-name prefixes the server exposes]",
)
@click.option(
    "--scrape-interval-s",
    type=float,
    default=1.0,
    show_default=True,
    help="seconds between /metrics scrapes into metrics.jsonl (--url runs)",
)
@click.option(
    "--engine",
    "engine",
    type=click.Choice(["sim"]),
    default=None,
    help="run the in-process simulator (virtual time) instead of --url",
)
@click.option(
    "--served-model", default=None, help="`model` field to send [default: first id of /v1/models]"
)
@click.option(
    "--transport",
    "transport_name",
    # = replay.driver.http.TRANSPORTS / DEFAULT_TRANSPORT (not imported here: it loads aiohttp
    # and httpx; tests/test_driver_http.py checks they agree)
    type=click.Choice(["aiohttp", "httpx", "raw"]),
    default="raw",
    show_default=True,
    help="HTTP client (raw: asyncio + httptools, the least client CPU; docs/driver.md)",
)
@click.option(
    "--gap-scale", type=float, default=1.0, show_default=True, help="multiply recorded gaps"
)
@click.option(
    "--timing",
    type=click.Choice(TIMINGS),
    default="think",
    show_default=True,
    help="think: recorded gaps after each dependency; original: recorded start-to-start pace",
)
@click.option(
    "--on-error",
    type=click.Choice(ON_ERROR),
    default="continue",
    show_default=True,
    help="after a failed call: go on with the task, or drop its remaining calls",
)
@click.option(
    "--strict", is_flag=True, help="fail the run on any prompt/completion length mismatch"
)
@click.option(
    "--max-inflight", type=int, default=None, help="cap on concurrent requests [default: off]"
)
@click.option("--max-rps", type=float, default=None, help="cap on sends per second [default: off]")
@click.option(
    "--request-timeout-s",
    type=float,
    default=600.0,
    show_default=True,
    help="limit for one whole request",
)
@click.option(
    "--server-gone-grace-s",
    type=float,
    default=30.0,
    show_default=True,
    help="retry refused connections this long before failing the run; a server silent this "
    "long past --request-timeout-s while calls time out fails it too",
)
@click.option(
    "--forcing/--no-forcing",
    default=None,
    help="send recorded output ids for exact forcing [default: when the engine adapter can]",
)
@click.option(
    "--efficientagent-task-id/--no-efficientagent-task-id",
    default=None,
    help='send kv_transfer_params {"efficientagent.task_id": TASK} with every request, as the '
    "EfficientAgent study's client does for its connector [default: on for lmcache, else off]",
)
@click.option(
    "--last-byte-sync/--no-last-byte-sync",
    default=None,
    help="write a long prompt's request ahead of its deadline, all but its last byte, and that "
    "byte at the deadline (raw transport; docs/driver.md); --no-last-byte-sync sends every "
    "request whole at its deadline [default: on, unless REPLAY_LAST_BYTE_SYNC=off]",
)
@click.option(
    "--timer-spin-s",
    type=click.FloatRange(0, MAX_TIMER_SPIN_S),
    default=TIMER_SPIN_S,
    show_default=True,
    help="sleep until this long before each send's deadline and poll for the rest, so the "
    "machine's wake-up latency does not make sends late; costs up to this much client CPU a "
    "deadline; 0 sleeps to the deadline (docs/driver.md)",
)
@click.option(
    "--truncate-prompt-tokens",
    type=int,
    default=None,
    help="keep only the first N tokens of each prompt; this destroys the prefix reuse of long "
    "traces (every prompt past N tokens becomes the same N), so to fit a model use "
    "`replay trace scale` instead",
)
@click.option(
    "--slo",
    default=None,
    help="service-level objectives for goodput, e.g. ttft=2s,itl=50ms (ttft, tt2t, itl, latency)",
)
@click.option(
    "--repeats",
    type=int,
    default=None,
    help="run the point N times as a one-point sweep into --out (<out>/default/r<i>/, "
    "summary.parquet, 95% intervals, report.md); resumes like a sweep",
)
@click.option(
    "--quiet",
    is_flag=True,
    help="progress as a plain line every 10 s instead of a live bar [default: bar on a terminal]",
)
@click.option("--json", "json_out", is_flag=True, help="print the summary as one JSON object")
@sim_options
def command(
    trace_path: str,
    trace_cache: bool,
    pool: int,
    out_dir: str,
    force: bool,
    url: str | None,
    engine_kind: str | None,
    scrape_interval_s: float,
    engine: str | None,
    served_model: str | None,
    transport_name: str,
    gap_scale: float,
    timing: str,
    on_error: str,
    strict: bool,
    max_inflight: int | None,
    max_rps: float | None,
    request_timeout_s: float,
    server_gone_grace_s: float,
    forcing: bool | None,
    efficientagent_task_id: bool | None,
    last_byte_sync: bool | None,
    timer_spin_s: float,
    truncate_prompt_tokens: int | None,
    slo: str | None,
    repeats: int | None,
    quiet: bool,
    json_out: bool,
    **simopts: Any,
) -> None:
    """Replay a trace with a closed-loop agent pool and write calls.parquet and run.json to --out.

    \b
    replay run --trace T --pool A --out DIR --url URL [--engine-kind vllm]
    replay run --trace T --pool A --out DIR --engine sim [SIMOPTS]
    """
    from replay.driver.latency import parse_slo
    from replay.driver.progress import progress_wanted
    from replay.driver.run import exit_code
    from replay.engines.registry import get_engine
    from replay.sweep.results import (
        all_calls_failed,
        check_out_dir,
        exclusive_lock,
        make_out_dir,
        prepare_out_dir,
    )
    from replay.trace.cache import default_cache_dir
    from replay.trace.io import read_trace
    from replay.trace.schedule import check_pool, is_open_loop

    if (url is None) == (engine is None):
        raise ConfigError("run", "--url/--engine", "give exactly one of --url URL or --engine sim")
    given_sim = sorted(k for k, v in simopts.items() if v is not None)
    if url is not None and given_sim:
        flags = ", ".join("--" + k.replace("_", "-") for k in given_sim)
        raise ConfigError("run", flags, "simulator options need --engine sim")
    given_http = [
        f for f, v in (("--engine-kind", engine_kind), ("--served-model", served_model)) if v
    ]
    if engine is not None and given_http:  # were taken and ignored
        raise ConfigError("run", ", ".join(given_http), "server options need --url URL")
    time_scale = simopts.get("time_scale")
    if engine is not None and time_scale is not None and 0 < time_scale < float("inf"):
        # recorded in run.json and ignored: the in-process simulator runs in virtual time
        raise ConfigError(
            "run",
            "--time-scale",
            "paces `replay sim serve` in wall time; --engine sim runs in virtual time (drop it)",
        )
    if url is not None:
        from replay.driver.http_common import HttpOptions

        try:
            HttpOptions(url)
        except ValueError as e:
            raise ConfigError("run", "--url", str(e)) from None
    kind_note = "given"
    if url is not None and engine_kind is None:
        from replay.cli.run_server import guess_engine_kind
        from replay.driver.http_common import HttpOptions

        engine_kind, kind_note = guess_engine_kind(HttpOptions(url).root)
    slo_s = parse_slo(slo) if slo is not None else None
    if not 0 < scrape_interval_s < math.inf:  # nan busy-looped the scraper, inf overflowed
        raise ConfigError(
            "run",
            "--scrape-interval-s",
            f"must be a finite number > 0 seconds, got {scrape_interval_s}",
        )
    if engine is not None:
        _refuse_server_options(click.get_current_context())
    adapter = get_engine("sim" if engine else (engine_kind or "external"))
    use_forcing = adapter.forcing if forcing is None else forcing
    use_task_id = (
        adapter.sends_task_id if efficientagent_task_id is None else efficientagent_task_id
    )
    # unset: RunOptions' own default (on unless REPLAY_LAST_BYTE_SYNC=off)
    sync = {} if last_byte_sync is None else {"last_byte_sync": last_byte_sync}
    try:
        options = RunOptions(
            pool=pool,
            gap_scale=gap_scale,
            timing=timing,  # type: ignore[arg-type]
            on_error=on_error,  # type: ignore[arg-type]
            strict=strict,
            max_inflight=max_inflight,
            max_rps=max_rps,
            request_timeout_s=request_timeout_s,
            server_gone_grace_s=server_gone_grace_s,
            progress=progress_wanted(json_out),
            progress_plain=quiet,
            forcing=use_forcing,
            truncate_prompt_tokens=truncate_prompt_tokens,
            request_extras=adapter.request_extras,
            min_max_tokens=adapter.min_max_tokens,
            efficientagent_task_id=use_task_id,
            timer_spin_s=timer_spin_s,
            **sync,
        )
    except ConfigError as e:  # RunOptions names its fields; the user typed flags
        flag = "--" + (e.field or "").replace("_", "-")
        raise ConfigError("run", flag, e.why) from None
    if repeats is not None:
        run_keys = dict(
            pool=pool, gap_scale=gap_scale, timing=timing, on_error=on_error, strict=strict,
            max_inflight=max_inflight, max_rps=max_rps, request_timeout_s=request_timeout_s,
            server_gone_grace_s=server_gone_grace_s, forcing=forcing,
            truncate_prompt_tokens=truncate_prompt_tokens,
            efficientagent_task_id=efficientagent_task_id, last_byte_sync=last_byte_sync,
            timer_spin_s=timer_spin_s,
        )  # fmt: skip
        if url is not None:
            run_keys["transport"] = transport_name
        if json_out:  # the repeats print their progress and intervals, not one JSON object
            raise ConfigError(
                "run", "--json", "not with --repeats: the repeats' summary.parquet and report "
                "hold them; read those",
            )  # fmt: skip
        _run_repeated(
            repeats, trace_path, out_dir, force, url, adapter, served_model, run_keys,
            simopts, slo_s, scrape_interval_s,
        )  # fmt: skip
        return
    trace = read_trace(trace_path, default_cache_dir() if trace_cache else None)
    check_pool(trace, pool)  # refuse before sending what would wait forever
    if max_inflight is None and is_open_loop(trace):
        click.echo(
            f"replay: note: {trace_path} is an open-loop trace (every call has at_s): calls go out "
            f"at their arrival times and --pool {pool} does not limit them; --max-inflight does",
            err=True,
        )
    if url is not None:
        long_wait = _long_wait_note(trace, gap_scale)
        if long_wait:
            click.echo(long_wait, err=True)
    # the served model before --out is made: --strict refuses to start without one
    model: str | None = None
    early: list[str] = []
    if url is not None:
        from replay.cli.run_server import UrlServer, check_vocabulary, model_to_send, run_http

        model, early = model_to_send(url, served_model, options.strict)
        check_vocabulary(trace, model)
    if adapter.in_process:  # bad simulator options are refused before --out is made
        from replay.sim.options import SimConfig

        SimConfig.from_options(**simopts)
    # An earlier run's files left beside this one's would be reported as this run's; a second
    # run on the same --out at once would write its calls beside this one's (refused by a lock,
    # taken once the directory is known to be one a run may write, so a wrong path gets none)
    check_out_dir(Path(out_dir), force=force)
    make_out_dir(Path(out_dir))
    with exclusive_lock(Path(out_dir), what="run"):
        prepare_out_dir(Path(out_dir), force=force)
        if adapter.in_process:
            summary = _run_sim(trace, options, out_dir, simopts, slo_s)
        else:
            assert url is not None
            server = UrlServer(url, adapter, kind_note, scrape_interval_s)
            summary = run_http(trace, options, out_dir, server, model, early, transport_name, slo_s)
    print_summary(summary, json_out)
    code = exit_code(summary["status"])
    if not code and all_calls_failed({"summary": summary}):
        # measured nothing: more likely the setup (a wrong --served-model, a refusing server);
        # exit 1 as a sweep does, so `replay run ... && next` stops here
        click.echo("replay: every call failed; see errors in the calls file", err=True)
        code = 1
    if code:
        sys.exit(code)  # click's Exit is swallowed by main() in non-standalone mode


LONG_WAIT_S = 3600.0  # a recorded gap this long, scaled, makes a real-time run worth a note


# options of a run against a server, which the in-process simulator (no HTTP, no /metrics,
# virtual time) took and ignored: a request timeout there never timed a call out
_SERVER_ONLY = (
    ("transport_name", "--transport"),
    ("request_timeout_s", "--request-timeout-s"),
    ("server_gone_grace_s", "--server-gone-grace-s"),
    ("last_byte_sync", "--last-byte-sync"),
    ("scrape_interval_s", "--scrape-interval-s"),
    ("timer_spin_s", "--timer-spin-s"),
)


def _refuse_server_options(ctx: click.Context) -> None:
    from click.core import ParameterSource

    given = [
        flag
        for name, flag in _SERVER_ONLY
        if ctx.get_parameter_source(name)
        in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    ]
    if given:
        raise ConfigError(
            "run", ", ".join(given),
            "apply to a server (--url URL); the in-process simulator has no HTTP and runs in "
            "virtual time: drop them, or serve it with `replay sim serve` and give --url",
        )  # fmt: skip


def _long_wait_note(trace, gap_scale: float) -> str | None:  # noqa: ANN001 (lazy Trace import)
    """A note when a real-time replay must wait out a recorded gap of an hour or more (an
    imported WEKA conversation idles up to 21.6 h): the run then lasts at least that task's gaps."""
    longest = max(trace.calls, key=lambda c: c.gap_s)
    if longest.gap_s * gap_scale < LONG_WAIT_S:
        return None
    task_s = sum(c.gap_s + (c.tail_gap_s or 0.0) for c in trace.tasks[longest.task]) * gap_scale
    return (
        f"replay: note: {longest.task} call {longest.index} waits {longest.gap_s * gap_scale / 3600:.1f} h "
        f"(its recorded gap x --gap-scale {gap_scale:g}), and its task's gaps add up to "
        f"{task_s / 3600:.1f} h: the run lasts at least that long in real time; --gap-scale "
        "shortens the gaps, trace slice --window keeps a part"
    )


def _run_repeated(
    repeats, trace_path, out_dir, force, url, adapter, served_model, run_keys, simopts, slo_s,
    scrape_interval_s,
) -> None:  # fmt: skip
    """--repeats N: the point as a one-point sweep (replay/cli/run_repeats.py)."""
    from replay.cli.run_repeats import experiment_toml, interval_lines, run_repeats

    if repeats < 1:
        raise ConfigError("run", "--repeats", f"must be >= 1, got {repeats}")
    if slo_s:
        raise ConfigError("run", "--slo", "not available with --repeats yet: run once per SLO")
    kind_table = None
    if url is None:
        engine = {"kind": "sim", **{k: v for k, v in simopts.items() if v is not None}}
        if repeats > 1 and not engine.get("jitter"):
            click.echo(
                "replay: note: the simulator is deterministic without --jitter: the repeats "
                "will be identical and their intervals zero wide",
                err=True,
            )
    else:
        engine = {"kind": "external", "url": url, "model": served_model}
        if adapter.name != "external":
            kind_table = {"kind": adapter.name}
        if adapter.reset_path is None:
            click.echo(
                f"replay: note: engine kind {adapter.name} has no cache reset: server state "
                "carries over from one repeat to the next",
                err=True,
            )
    text = experiment_toml(
        Path(out_dir).resolve().name,
        repeats,
        trace_path,
        run_keys,
        engine,
        kind_table,
        scrape_interval_s if url is not None else None,
    )
    result, report = run_repeats(out_dir, text, force=force, echo=click.echo)
    for line in interval_lines(result.exp_dir):
        click.echo(line)
    click.echo(f"written: {report.report}")
    if result.interrupted:
        sys.exit(130)
    ran = [o for o in result.outcomes if o.status != "skipped"]
    if result.failed:
        sys.exit(1 if len(result.failed) == len(ran) else 0)


def _run_sim(
    trace: Trace, options: RunOptions, out_dir: str, simopts: dict[str, Any], slo_s
) -> dict:
    from replay.driver.run import run_replay
    from replay.sim.options import SimConfig
    from replay.sim.transport import SimTransport

    config = SimConfig.from_options(**simopts)
    made: list[SimTransport] = []

    def factory() -> SimTransport:
        made.append(SimTransport(config, vocab_size=trace.header.vocab_size))
        return made[-1]

    prov = {"engine": "sim", "sim_config": config.to_dict()}
    return run_replay(
        trace,
        factory,
        options,
        out_dir,
        virtual=True,
        provenance=prov,
        counters_fn=lambda: made[-1].counters(),
        slo_s=slo_s,
    )
