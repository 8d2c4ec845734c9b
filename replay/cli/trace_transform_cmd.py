"""`replay trace scale|slice|merge`: thin wrappers over `replay.trace.scale` and `.slicing`."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from replay.cli.trace_out import check_out, write_out
from replay.errors import ConfigError, TraceError

__all__ = ["add_to"]


def _read(file: str):  # noqa: ANN202 (the Trace import stays lazy)
    from replay.trace.io import read_trace_checked

    try:
        return read_trace_checked(file)
    except TraceError as e:
        click.echo(e.format(), err=True)
        sys.exit(e.exit_code)


def _written(trace, out: str, cmd: str) -> None:  # noqa: ANN001
    write_out(trace, out, cmd)
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
    check_out(out, "scale", [file])
    _written(scale_trace(_read(file), k, time_factor), out, "scale")


def _pair(text: str | None, option: str, kind: type, unit: str) -> tuple:
    """START:END (either side may be left out: from 0, to the end) as numbers of `kind`."""
    if text is None:
        return None, None
    a, sep, b = text.partition(":")
    try:
        start = kind(a) if a else kind(0)
        stop = kind(b) if b else None
    except ValueError:
        start, stop, sep = -1, None, ""
    if sep != ":" or not start >= 0 or (stop is not None and not stop > start):
        raise ConfigError(
            option, None, f"expected START:END {unit}, 0 <= START < END, got {text!r}"
        )
    return start, stop


@click.command("slice")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("-o", "--out", required=True, type=click.Path(dir_okay=False), help="OUT.jsonl.gz")
@click.option("--tasks", type=int, default=None, help="the first N root tasks (and sub-agents)")
@click.option("--task-ids", default=None, help="comma-separated task ids (and their sub-agents)")
@click.option("--max-calls-per-task", type=int, default=None, help="keep calls 0..M-1 of each task")
@click.option(
    "--window",
    default=None,
    help="START:END seconds: keep the calls sent in [START, END) of the trace's timeline",
)
@click.option("--window-calls", default=None,
              help="START:END: keep calls START..END-1 of each task (call indices)")  # fmt: skip
def slice_cmd(
    file: str,
    out: str,
    tasks: int | None,
    task_ids: str | None,
    max_calls_per_task: int | None,
    window: str | None,
    window_calls: str | None,
) -> None:
    """Keep some tasks and calls of FILE; dependencies stay consistent.

    A chosen sub-agent whose parent task is not kept becomes a root task; joins (`after`) on cut
    calls are removed; the first kept call of a task sends its whole prompt. --window counts
    seconds on the trace's own timeline (open loop: after the first arrival; closed loop: when
    each call is sent with a slot per root task and calls taking no time) and re-roots a
    sub-agent whose spawning call is before the window; --window-calls counts call indices and
    drops a sub-agent whose spawning call it cut. See docs/trace.md, "Slicing and merging".
    """
    from replay.trace.slicing import slice_trace

    given = [n for n, v in [("--window", window), ("--window-calls", window_calls),
                            ("--max-calls-per-task", max_calls_per_task)] if v is not None]  # fmt: skip
    if len(given) > 1:
        raise ConfigError(given[0], None, f"give only one of {', '.join(given)}")
    window_s = _pair(window, "--window", float, "seconds") if window is not None else None
    start, stop = _pair(window_calls, "--window-calls", int, "call indices")
    if max_calls_per_task is not None:
        if max_calls_per_task < 1:
            raise ConfigError(
                "slice", "--max-calls-per-task", f"must be >= 1, got {max_calls_per_task}"
            )
        stop = max_calls_per_task
    ids = None if task_ids is None else [t for t in task_ids.split(",") if t]
    check_out(out, "slice", [file])
    cut = slice_trace(
        _read(file), tasks=tasks, task_ids=ids, start=start or 0, stop=stop, window_s=window_s
    )
    _written(cut, out, "slice")


@click.command("merge")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("-o", "--out", required=True, type=click.Path(dir_okay=False), help="OUT.jsonl.gz")
def merge_cmd(files: tuple[str, ...], out: str) -> None:
    """Put the tasks of FILES into one trace (one pool), in order; clashing ids get FILE/ prefixes."""
    from replay.trace.slicing import merge_traces

    names = [Path(f).name.split(".")[0] for f in files]
    check_out(out, "merge", files)
    _written(merge_traces([_read(f) for f in files], names), out, "merge")


def add_to(group: click.Group) -> None:
    """Register these commands under `replay trace`."""
    for cmd in (scale_cmd, slice_cmd, merge_cmd):
        group.add_command(cmd)
