"""`replay trace validate|stats|import|synth`: thin wrappers over `replay.trace`."""

from __future__ import annotations

import sys

import click
import orjson

from replay.cli.trace_out import check_out, write_out
from replay.errors import TraceError
from replay.trace.model import MAX_VOCAB_SIZE

__all__ = ["command"]


@click.group(name="trace")
def command() -> None:
    """Validate, summarize, import and synthesize traces (format v1, see traces/FORMAT.md)."""


@command.command("validate")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option(
    "--pool",
    type=click.IntRange(min=1),
    default=None,
    help="also check that a pool of this many slots can run every call (no wait that never ends)",
)
def validate_cmd(file: str, pool: int | None) -> None:
    """Check FILE; print `FILE:LINE: field: why` and exit 2 if it is malformed."""
    from replay.trace.io import read_trace_checked
    from replay.trace.schedule import check_pool

    try:
        trace = read_trace_checked(file)
        if pool is not None:
            check_pool(trace, pool)
    except TraceError as e:
        click.echo(e.format())
        # SystemExit, not click's Exit: the entry point runs click with standalone_mode=False,
        # where click returns an Exit's code instead of exiting with it.
        sys.exit(e.exit_code)
    click.echo(f"{file}: ok: {len(trace.tasks)} tasks, {len(trace)} calls")


def _fmt(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.4f}" if abs(v) < 10 else f"{v:,.1f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


@command.command("stats")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def stats_cmd(file: str, as_json: bool) -> None:
    """Tasks, calls, token totals, prompt lengths, prefix reuse and gaps of FILE."""
    from replay.trace.io import read_trace_checked
    from replay.trace.stats import trace_stats

    trace = read_trace_checked(file)
    stats = trace_stats(trace).to_dict()
    if as_json:
        click.echo(orjson.dumps(stats).decode())
        return
    width = max(len(k) for k in stats)
    for k, v in stats.items():
        click.echo(f"{k:<{width}}  {_fmt(v)}")


@command.command("import")
@click.option(
    "--from",
    "kind",
    required=True,
    type=click.Choice(["efficientagent", "weka", "mooncake", "tokenlog"]),
    help="source layout",
)
@click.argument("src", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("-o", "--out", required=True, type=click.Path(dir_okay=False), help="OUT.jsonl.gz")
@click.option(
    "--vocab-size",
    type=click.IntRange(min=2, max=MAX_VOCAB_SIZE),
    default=None,
    help="vocabulary of the target model (default: from the source, else 32000 / inferred)",
)
def import_cmd(kind: str, src: tuple[str, ...], out: str, vocab_size: int | None) -> None:
    """Convert recorded traces (SRC files or directories) into one v1 trace file."""
    from replay.trace.importers import import_trace

    check_out(out, "import", src)
    trace = import_trace(kind, list(src), vocab_size=vocab_size)
    write_out(trace, out, "import")
    click.echo(f"{out}: {len(trace.tasks)} tasks, {len(trace)} calls")
    files = sorted({c.ns for c in trace.calls if c.ns}) if kind == "mooncake" else []
    if len(files) > 1:  # each file keeps its own timestamps, on one timeline
        click.echo(
            f"replay: note: {len(files)} Mooncake files ({', '.join(f.split(':', 1)[-1] for f in files)}) "
            "keep their own timestamps on one timeline: their loads overlap in one open-loop run; "
            "import one file for one workload",
            err=True,
        )


@command.command("synth")
@click.option("--preset", required=True, help="swe-agent, claude-code or explainer")
@click.option("--tasks", type=int, default=None, help="root tasks (default: the preset's)")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("-o", "--out", required=True, type=click.Path(dir_okay=False), help="OUT.jsonl.gz")
@click.option("--shared-head-tokens", type=click.IntRange(min=0), default=None)
@click.option("--scale", type=float, default=1.0, show_default=True, help="multiply token lengths")
@click.option("--max-prompt-tokens", type=int, default=None)
@click.option("--max-calls-per-task", type=int, default=None)
@click.option(
    "--vocab-size", type=click.IntRange(min=2, max=MAX_VOCAB_SIZE), default=32000, show_default=True
)
def synth_cmd(
    preset: str,
    tasks: int | None,
    seed: int,
    out: str,
    shared_head_tokens: int | None,
    scale: float,
    max_prompt_tokens: int | None,
    max_calls_per_task: int | None,
    vocab_size: int,
) -> None:
    """Write a seeded synthetic trace calibrated to published agent statistics."""
    from replay.trace.synth import synth

    check_out(out, "synth")
    trace = synth(
        preset,
        tasks=tasks,
        seed=seed,
        shared_head_tokens=shared_head_tokens,
        vocab_size=vocab_size,
        scale=scale,
        max_prompt_tokens=max_prompt_tokens,
        max_calls_per_task=max_calls_per_task,
    )
    write_out(trace, out, "synth")
    click.echo(
        f"{out}: {len(trace.tasks)} tasks, {len(trace)} calls, {trace.prompt_tokens:,} prompt tokens"
    )


@command.command("fold")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("-o", "--out", required=True, type=click.Path(dir_okay=False), help="OUT.jsonl.gz")
@click.option(
    "--from-call", type=int, default=8, show_default=True, help="first call (0-based) that folds"
)
@click.option(
    "--every",
    type=int,
    default=1,
    show_default=True,
    help="fold at --from-call and every N calls after it (1: every call from there on)",
)
@click.option(
    "--keep-head-tokens",
    type=int,
    default=2048,
    show_default=True,
    help="leading tokens never rewritten (system prompt, tools, task statement)",
)
@click.option(
    "--fold-fraction",
    type=float,
    default=0.5,
    show_default=True,
    help="share of the prompt after the head that a fold replaces with a summary",
)
@click.option(
    "--summary-tokens",
    type=int,
    default=1024,
    show_default=True,
    help="length of the summary that replaces it (a fold that would not shrink the prompt is "
    "skipped)",
)
@click.option(
    "--seed", type=int, default=0, show_default=True, help="seeds the summaries' token ids"
)
def fold_cmd(file: str, out: str, **spec: object) -> None:
    """Rewrite an early part of each task's history from some call on (context folding).

    Every token after a rewritten stretch has a new prefix, so the next call reuses only what
    comes before it: how the EfficientAgent study's folding lowered the prefix hit rate. Works
    on token-id traces. See docs/trace.md, "Context folding".
    """
    from replay.trace.fold import FoldSpec, fold_trace
    from replay.trace.io import read_trace_checked

    check_out(out, "fold", [file])
    trace = fold_trace(read_trace_checked(file), FoldSpec(**spec))  # type: ignore[arg-type]
    write_out(trace, out, "fold")
    click.echo(
        f"{out}: {len(trace.tasks)} tasks, {len(trace)} calls, {trace.prompt_tokens:,} prompt tokens"
    )
