"""`replay compare A B`: every counter and latency of B against baseline A, with the difference,
its 95% interval and Welch's verdict (replay/analysis/compare.py).

A side is a results directory of one point (a `replay run` directory, a `replay run --repeats`
directory, a one-point sweep) or one point of a sweep, named as `RESULTS_DIR/POINT`.
"""

from __future__ import annotations

import math
from pathlib import Path

import click

from replay.cli.out_file import check_outside, check_plain_file
from replay.errors import ConfigError

__all__ = ["command", "load_side", "format_comparison"]


def load_side(path: str):
    """The ok runs (one row per repeat) of one point: a run, an experiment of one point, or a
    point directory inside an experiment."""
    from replay.analysis.load import load_results

    p = Path(path)
    if not p.is_dir():
        what = "a file, not a results directory" if p.exists() else "no such results directory"
        raise ConfigError(path, None, what)
    point = None
    if p.parent.is_dir() and any((d / "run.json").is_file() for d in p.glob("r*")):
        p, point = p.parent, p.name  # RESULTS_DIR/POINT
    results = load_results(p)
    every = results.runs
    notes = list(results.notes)
    if point is not None:
        every = every[every["point"] == point]
        notes = [n for n in notes if n.startswith(f"{point}/")]
    runs = every[every["status"] == "ok"]
    left_out = every[every["status"] != "ok"]
    if not left_out.empty:  # the statistics count finished runs only, as the report's do
        said = ", ".join(
            f"{r} ({st})" for r, st in zip(left_out["repeat"], left_out["status"], strict=True)
        )
        where = p / point if point is not None else p
        click.echo(f"replay: {where}: left out, not finished with status ok: {said}", err=True)
    points = sorted(set(runs["point"])) if "point" in runs else []
    if len(points) > 1:
        raise ConfigError(
            path, None, f"holds {len(points)} points; name one as {path.rstrip('/')}/POINT "
            f"(points: {', '.join(points[:6])})",
        )  # fmt: skip
    if runs.empty:
        why = f" ({'; '.join(notes)})" if notes else ""
        raise ConfigError(path, None, f"no finished runs (status ok) here{why}")
    for note in notes:  # what was left out of the comparison, and why
        click.echo(f"replay: {p / note}", err=True)
    # the matrix's settings name the point; they are not measurements to compare
    return runs.drop(columns=[c for c in results.params if c in runs.columns]).reset_index(
        drop=True
    )


def _num(v: float) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.6g}"


def format_comparison(table, name_a: str, name_b: str, alpha: float = 0.05) -> list[str]:
    """The comparison as aligned text lines; the interval is the (1 - alpha) one."""
    level = f"{(1 - alpha) * 100:.4g}% interval"
    head = f"{'metric':<28}{'A':>13}{'B':>13}{'B - A':>13}{level:>30}{'n':>7}  verdict"
    lines = [f"A = {name_a}", f"B = {name_b}", head]
    for r in table.itertuples(index=False):
        ci = "-" if math.isnan(r.diff_low) else f"[{_num(r.diff_low)}, {_num(r.diff_high)}]"
        lines.append(
            f"{r.metric:<28} {_num(r.mean_a):>12} {_num(r.mean_b):>12} {_num(r.diff):>12}"
            f" {ci:>29}{f'{r.n_a}/{r.n_b}':>7}  {r.verdict}"
        )
    return lines


@click.command(name="compare")
@click.argument("a")
@click.argument("b")
@click.option("--alpha", type=float, default=0.05, show_default=True, help="test level")
@click.option("--csv", "csv_out", default=None, help="also write the table to this CSV file")
def command(a: str, b: str, alpha: float, csv_out: str | None) -> None:
    """Compare B against baseline A: every counter and latency, B - A, its interval, verdict.

    \b
    replay compare results/x results/y
    replay compare results/quick/host_tier_gib=0 results/quick/host_tier_gib=8
    """
    from replay.analysis.compare import compare_sides

    if not 0 < alpha < 1:
        raise ConfigError("compare", "--alpha", f"must be between 0 and 1, got {alpha}")
    from replay.analysis.trace_ids import short_shas, traces_of

    if csv_out:
        check_plain_file(csv_out, "compare", "--csv")
        check_outside(csv_out, [a, b], "compare", "--csv")
        if not Path(csv_out).parent.is_dir():
            why = f"no such directory {str(Path(csv_out).parent)!r}"
            raise ConfigError("compare", "--csv", f"cannot write {csv_out!r}: {why}")
    side_a, side_b = load_side(a), load_side(b)
    traces_a, traces_b = traces_of(side_a.get("run_dir", [])), traces_of(side_b.get("run_dir", []))
    if traces_a and traces_b and traces_a != traces_b:
        click.echo(
            f"replay: note: A and B replayed different traces (sha256 {short_shas(traces_a)} "
            f"against {short_shas(traces_b)}): their differences are the "
            "workload's as much as the setting's",
            err=True,
        )
    table = compare_sides(side_a, side_b, alpha=alpha)
    if table.empty:
        raise ConfigError("compare", None, "the two sides have no measured number in common")
    if csv_out:  # first: a path that cannot be written fails before the table is shown
        from replay.sweep.results import write_bytes_atomic

        # whole or not at all: on a full disk a plain write left a truncated CSV under its name
        write_bytes_atomic(Path(csv_out), table.to_csv(index=False).encode())
    for line in format_comparison(table, a, b, alpha):
        click.echo(line)
