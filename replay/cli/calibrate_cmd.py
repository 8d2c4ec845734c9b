"""`replay calibrate`: fit the simulator's costs to measured points, predict the others."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import click
import orjson

from replay.cli.out_file import check_plain_file
from replay.errors import ConfigError

__all__ = ["command"]


def _pct(v: Any) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{100 * v:+.1f}%"


def _share(v: Any) -> str:
    """A non-negative fraction (an rms over a mean) as a percentage, without a sign."""
    return "-" if v is None or not math.isfinite(v) else f"{100 * v:.1f}%"


def _text(report: dict[str, Any], costs_path: str) -> str:
    c = report["costs"]
    r = report["residuals"]
    lines = [
        f"engine {report['engine']}; costs written to {costs_path}",
        f"  request overhead {1e3 * c['request_overhead_s']:.3f} ms, prefill "
        f"{1e6 * c['prefill_s_per_token']:.2f} us/token + {1e9 * c['attention_s_per_pair']:.3f} "
        f"ns per attention pair, decode {1e3 * c['decode_step_s']:.3f} ms/step + "
        f"{1e3 * c['decode_s_per_seq']:.3f} ms/sequence, restore "
        f"{1e6 * c['restore_s_per_token']:.3f} us/token + {1e3 * c['restore_s_per_chunk']:.3f} "
        "ms/chunk",
        f"  fit on {r['calls']} calls: time-to-first-token residual rms "
        f"{1e3 * r['ttft_residual_rms_s']:.2f} ms ({_share(r['ttft_residual_rel'])} of the mean), "
        f"decode {1e3 * r['decode_residual_rms_s']:.2f} ms ({_share(r['decode_residual_rel'])})",
    ]
    if r.get("notes"):
        lines.append(f"  notes: {r['notes']}")
    head = f"  {'point':<34} {'runs':>4} {'makespan':>9} {'TTFT p50':>9} {'prefill':>9}"
    head += f" {'restores':>9} {'hit frac':>9}"
    for kind in ("fit", "heldout"):
        lines += ["", f"{kind} points (simulated vs measured mean, signed relative error):", head]
        for row in report[kind]:
            if "skipped" in row:
                lines.append(f"  {row['point']:<34} {row['skipped']}")
                continue
            hit = row["device_hit_fraction_error"]
            lines.append(
                f"  {row['point']:<34} {row['runs']:>4} {_pct(row['makespan_error']):>9} "
                f"{_pct(row['ttft_p50_error']):>9} {_pct(row['computed_prefill_error']):>9} "
                f"{_pct(row['restores_error']):>9} "
                f"{'-' if hit is None else f'{hit:+.3f}':>9}"
            )
    lines.append("(hit frac: simulated minus measured device hit fraction, absolute)")
    if report.get("orders", 1) > 1:
        lines += ["", f"over {report['orders']} simulated call orders (min..max; measured mean):"]
        for row in report["fit"] + report["heldout"]:
            if "skipped" in row:
                continue
            parts = []
            for key, label, fmt in _RANGES:
                lo_hi, meas = row["simulated_range"].get(key), row["measured"].get(key)
                if lo_hi is not None and meas is not None:
                    parts.append(f"{label} {fmt(lo_hi[0])}..{fmt(lo_hi[1])} ({fmt(meas)})")
            lines.append(f"  {row['point']:<34} " + ", ".join(parts))
    if report.get("per_run_speed"):
        lines += ["", "at each run's own speed factor (the machine's load taken out):"]
        lines.append(f"  {'point':<34} {'makespan':>9} {'TTFT p50':>9}")
        for row in report["fit"] + report["heldout"]:
            if "makespan_error_at_run_speed" in row:
                lines.append(
                    f"  {row['point']:<34} {_pct(row['makespan_error_at_run_speed']):>9} "
                    f"{_pct(row['ttft_p50_error_at_run_speed']):>9}"
                )
    lines += ["", "runs (speed: time / the median fitted run's; load: 1-minute load average):"]
    for r in report.get("runs", []):
        speed = "-" if r["speed"] is None else f"{r['speed']:.2f}"
        load = [r["load_average_1m"], r["load_average_1m_end"]]
        loads = " -> ".join("-" if v is None else f"{v:.1f}" for v in load)
        lines.append(
            f"  {r['point']:<34} {r['run']:<4} {r['role']:<8} speed {speed:>5}  load {loads}"
        )
    return "\n".join(lines)


_RANGES = (
    ("makespan_s", "makespan", lambda v: f"{v:.2f} s"),
    ("computed_prefill_tokens", "prefill", lambda v: f"{v:,.0f}"),
)


def _results_files() -> frozenset[str]:
    """What a results folder holds besides its run directories (docs/results.md)."""
    from replay.sweep.results import FOLDER_FILES, LOCK_FILE

    return FOLDER_FILES | {LOCK_FILE}


def _check_out(out: Path, results_dir: Path) -> None:
    """Refuse a costs file that would replace one of the results it is fitted to (`-o
    RESULTS/experiment.toml` wrote the costs over the experiment and broke the folder)."""
    target, root = out.resolve(), results_dir.resolve()
    if target.is_relative_to(root) and (target.name in _results_files() or target.parent != root):
        raise ConfigError(
            "calibrate", "-o", f"{str(out)!r} is part of the results in {str(results_dir)!r}; "
            "write the costs elsewhere (a new file name there is fine)",
        )  # fmt: skip
    # before the fit, not after it: a folder, or a file in a missing folder, failed only then
    if out.is_dir():
        raise ConfigError("calibrate", "-o", f"{str(out)!r} is a directory; name a costs file")
    if not out.parent.is_dir():
        raise ConfigError("calibrate", "-o", f"{str(out.parent)!r} does not exist; make it first")
    check_plain_file(out, "calibrate", "-o")


@click.command("calibrate")
@click.argument("results_dir", type=click.Path(path_type=Path))
@click.option(
    "--fit",
    "fit_points",
    multiple=True,
    required=True,
    help="point (its directory name, e.g. host_tier_gib=0) whose runs the costs are fitted to",
)
@click.option("-o", "--out", "out", required=True, type=click.Path(), help="costs TOML to write")
@click.option("--json", "as_json", is_flag=True, help="print the report as JSON")
@click.option(
    "--per-run-speed",
    is_flag=True,
    help="fit a speed factor per run beside the costs (a shared machine whose load changes "
    "between runs); also report each point's errors simulated at its runs' own factors",
)
@click.option(
    "--orders",
    type=int,
    default=1,
    show_default=True,
    help="simulate each point in this many call orders (the recorded one, then seeded shuffles "
    "of the tasks' start order with +-10% step noise) and predict their mean; a real engine's "
    "repeats each follow the order their own timing picks",
)
def command(
    results_dir: Path,
    fit_points: tuple[str, ...],
    out: str,
    as_json: bool,
    per_run_speed: bool,
    orders: int,
) -> None:
    """Fit the simulator's costs to the measured runs of RESULTS_DIR's --fit points, simulate
    every point with them and the engine's personality, and report the errors."""
    from replay.calibrate.heldout import calibrate
    from replay.calibrate.orders import check_orders
    from replay.calibrate.records import read_results

    check_orders(orders)  # before the results are read: a bad count is the first thing said
    _check_out(Path(out), Path(results_dir))
    twice = sorted({p for p in fit_points if fit_points.count(p) > 1})
    if twice:  # its runs would be fitted twice over, and the point listed twice
        raise ConfigError("calibrate", "--fit", f"{', '.join(twice)} given more than once")

    report = calibrate(read_results(results_dir), list(fit_points), out, per_run_speed, orders)
    if as_json:
        click.echo(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
    else:
        click.echo(_text(report, out))
