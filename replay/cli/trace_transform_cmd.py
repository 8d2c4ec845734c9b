"""`replay trace scale|slice|merge`: thin wrappers over `replay.trace.scale` and `.slicing`."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from replay.errors import ConfigError, TraceError

__all__ = ["add_to"]


def _read(file: str):  # noqa: ANN202 (the Trace import stays lazy)
    from replay.trace.io import read_trace

    try:
        return read_trace(file)
    except TraceError as e:
        click.echo(e.format(), err=True)
        sys.exit(e.exit_code)


def _written(trace, out: str) -> None:  # noqa: ANN001
    from replay.trace.io import write_trace

    write_trace(trace, out)
    click.echo(
        f"{out}: {len(trace.tasks)} tasks, {len(trace)} calls, {trace.prompt_tokens:,} prompt tokens"
    )


@click.command("scale")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("-o", "--out", required=True, type=click.Path(dir_okay=False), help="OUT.jsonl.gz")
@click.option("--tokens", "tokens", required=True, help="1/K: every K-token block becomes 1 token")
@click.option("--time", "time_factor", type=float, default=1.0, show_default=True,
              help="multiply every gap and arrival time by this")  # fmt: skip
def scale_cmd(file: str, out: str, tokens: str, time_factor: float) -> None:
    """Shrink FILE's prompts and outputs K-fold keeping its prefix-reuse structure exact.

    Two scaled prompts share floor(L/K) tokens exactly when the originals share L; tasks, calls,
    sub-agents and order are unchanged. Works on token-id and block-hash traces; writes a
    token-id trace. See docs/trace.md, "Scaling a trace".
    """
    from replay.trace.scale import parse_fraction, scale_trace

    k = parse_fraction(tokens)
    _written(scale_trace(_read(file), k, time_factor), out)


def _window(text: str | None) -> tuple[int, int | None]:
    if text is None:
        return 0, None
    a, sep, b = text.partition(":")
    try:
        start = int(a) if a else 0
        stop = int(b) if b else None
    except ValueError:
        start, stop, sep = -1, None, ""
    if sep != ":" or start < 0:
        raise ConfigError("--window", None, f"expected START:END call indices, got {text!r}")
    return start, stop


@click.command("slice")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("-o", "--out", required=True, type=click.Path(dir_okay=False), help="OUT.jsonl.gz")
@click.option("--tasks", type=int, default=None, help="the first N root tasks (and sub-agents)")
@click.option("--task-ids", default=None, help="comma-separated task ids (and their sub-agents)")
@click.option("--max-calls-per-task", type=int, default=None, help="keep calls 0..M-1 of each task")
@click.option("--window", default=None, help="START:END: keep calls START..END-1 of each task")
def slice_cmd(
    file: str,
    out: str,
    tasks: int | None,
    task_ids: str | None,
    max_calls_per_task: int | None,
    window: str | None,
) -> None:
    """Keep some tasks and calls of FILE; dependencies stay consistent.

    A chosen sub-agent whose parent task is not kept becomes a root task; a sub-agent spawned by
    a call the window cut is dropped with its own sub-agents; joins (`after`) on cut calls are
    removed; the first call of a window sends its whole prompt.
    """
    from replay.trace.slicing import slice_trace

    start, stop = _window(window)
    if max_calls_per_task is not None:
        if window is not None:
            raise ConfigError("--max-calls-per-task", None, "give it or --window, not both")
        stop = max_calls_per_task
    ids = None if task_ids is None else [t for t in task_ids.split(",") if t]
    _written(slice_trace(_read(file), tasks=tasks, task_ids=ids, start=start, stop=stop), out)


@click.command("merge")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("-o", "--out", required=True, type=click.Path(dir_okay=False), help="OUT.jsonl.gz")
def merge_cmd(files: tuple[str, ...], out: str) -> None:
    """Put the tasks of FILES into one trace (one pool), in order; clashing ids get FILE/ prefixes."""
    from replay.trace.slicing import merge_traces

    names = [Path(f).name.split(".")[0] for f in files]
    _written(merge_traces([_read(f) for f in files], names), out)


def add_to(group: click.Group) -> None:
    """Register these commands under `replay trace`."""
    for cmd in (scale_cmd, slice_cmd, merge_cmd):
        group.add_command(cmd)
