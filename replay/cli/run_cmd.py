"""`replay run`: replay a trace against a server (--url) or the in-process simulator (--engine sim)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import orjson

from replay.driver.options import ON_ERROR, TIMINGS, RunOptions
from replay.errors import ConfigError
from replay.sim.options import sim_options

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
    default="external",
    show_default=True,
    help="engine adapter for request extras (vllm, sglang, ...)",
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
    help="retry refused connections this long before failing the run",
)
@click.option(
    "--forcing/--no-forcing",
    default=None,
    help="send recorded output ids for exact forcing [default: when the engine adapter can]",
)
@click.option(
    "--truncate-prompt-tokens",
    type=int,
    default=None,
    help="keep only the first N tokens of each prompt; this destroys the prefix reuse of long "
    "traces (every prompt past N tokens becomes the same N), so to fit a model use "
    "`replay trace scale` instead",
)
@click.option("--json", "json_out", is_flag=True, help="print the summary as one JSON object")
@sim_options
def command(
    trace_path: str,
    pool: int,
    out_dir: str,
    force: bool,
    url: str | None,
    engine_kind: str,
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
    truncate_prompt_tokens: int | None,
    json_out: bool,
    **simopts: Any,
) -> None:
    """Replay a trace with a closed-loop agent pool and write calls.parquet and run.json to --out.

    \b
    replay run --trace T --pool A --out DIR --url URL [--engine-kind vllm]
    replay run --trace T --pool A --out DIR --engine sim [SIMOPTS]
    """
    from replay.driver.progress import progress_wanted
    from replay.driver.run import exit_code
    from replay.engines.registry import get_engine
    from replay.sweep.results import prepare_out_dir
    from replay.trace.io import read_trace

    if (url is None) == (engine is None):
        raise ConfigError("run", "--url/--engine", "give exactly one of --url URL or --engine sim")
    given_sim = sorted(k for k, v in simopts.items() if v is not None)
    if url is not None and given_sim:
        flags = ", ".join("--" + k.replace("_", "-") for k in given_sim)
        raise ConfigError("run", flags, "simulator options need --engine sim")
    if url is not None:
        from replay.driver.http_common import HttpOptions

        try:
            HttpOptions(url)
        except ValueError as e:
            raise ConfigError("run", "--url", str(e)) from None
    adapter = get_engine("sim" if engine else engine_kind)
    use_forcing = adapter.forcing if forcing is None else forcing
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
        forcing=use_forcing,
        truncate_prompt_tokens=truncate_prompt_tokens,
        request_extras=adapter.request_extras,
    )
    trace = read_trace(trace_path)
    # An earlier run's files left beside this one's would be reported as this run's.
    prepare_out_dir(Path(out_dir), force=force)
    if engine == "sim":
        summary = _run_sim(trace, options, out_dir, simopts)
    else:
        assert url is not None
        summary = _run_http(trace, options, out_dir, url, engine_kind, served_model, transport_name)
    _print(summary, json_out)
    code = exit_code(summary["status"])
    if code:
        sys.exit(code)  # click's Exit is swallowed by main() in non-standalone mode


def _run_http(trace, options, out_dir, url, engine_kind, served_model, transport_name):
    from replay.driver.control import served_model as fetch_served_model
    from replay.driver.http import http_transport_factory
    from replay.driver.run import run_replay

    model = served_model or fetch_served_model(url)
    factory = http_transport_factory(url, trace, options, transport=transport_name, model=model)
    prov = {"url": url, "engine": engine_kind, "served_model": model, "transport": transport_name}
    return run_replay(trace, factory, options, out_dir, provenance=prov)


def _run_sim(trace: Trace, options: RunOptions, out_dir: str, simopts: dict[str, Any]) -> dict:
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
    )


def _print(summary: dict, json_out: bool) -> None:
    if json_out:
        sys.stdout.write(orjson.dumps(summary, option=orjson.OPT_SERIALIZE_NUMPY).decode() + "\n")
        return
    s = summary

    def ms(v):
        return "-" if v is None else f"{v * 1e3:.1f} ms"

    click.echo(f"status       {s['status']}" + (f" ({s['reason']})" if s.get("reason") else ""))
    click.echo(
        f"calls        {s['calls']} of {s['calls_total']}  errors {s['errors']}  skipped {s['calls_skipped']}"
    )
    click.echo(f"makespan     {s['makespan_s']:.2f} s")
    click.echo(
        f"tokens       prompt {s['prompt_tokens']}  output {s['output_tokens']}  cached {s['cached_tokens']}"
    )
    click.echo(
        f"ttft         p50 {ms(s['ttft_p50_s'])}  p90 {ms(s['ttft_p90_s'])}  p99 {ms(s['ttft_p99_s'])}"
    )
    jct = s["jct_p50_s"], s["jct_p90_s"]
    click.echo(
        "task jct     " + ("-" if jct[0] is None else f"p50 {jct[0]:.2f} s  p90 {jct[1]:.2f} s")
    )
    click.echo(
        f"mismatches   prompt {s['prompt_mismatches']}  completion {s['completion_mismatches']}"
    )
    click.echo(
        f"send drift   p50 {ms(s['drift_p50_s'])}  p99 {ms(s['drift_p99_s'])}  max {ms(s['drift_max_s'])}"
    )
    if s.get("error_kinds"):
        click.echo("errors by    " + "  ".join(f"{k} {v}" for k, v in s["error_kinds"].items()))
