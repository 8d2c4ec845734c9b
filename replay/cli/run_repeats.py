"""`replay run --repeats N`: the run's one point as a one-point sweep, so repeats get the sweep's
results layout (`<out>/default/r<i>/`), resume, summary.parquet, 95% t-intervals and report.

The command line becomes an experiment file (`<out>/experiment.toml`, kept like any sweep's) and
`run_sweep` runs it: there is no second code path for repeated runs. Between repeats the sweep
gives the in-process simulator a fresh engine (seed + repeat index) and an external server a
checked prefix-cache reset where its adapter has one; where it has none, state carries over and
the command says so.
"""

from __future__ import annotations

import math
import re
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from replay.errors import ConfigError

__all__ = ["experiment_toml", "run_repeats", "interval_lines", "HEADLINE_METRICS"]

# What the interval table shows first (every other numeric summary key is in summary.parquet).
HEADLINE_METRICS = (
    "makespan_s",
    "output_tokens_per_s",
    "ttft_p50_s",
    "ttft_p99_s",
    "itl_p50_s",
    "latency_p50_s",
    "jct_p50_s",
    "cached_tokens",
    "device_hit_tokens",
    "host_restore_tokens",
    "computed_prefill_tokens",
    "errors",
)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _table(name: str, values: Mapping[str, Any]) -> list[str]:
    return [f"[{name}]", *(f"{k} = {_toml_value(v)}" for k, v in values.items() if v is not None)]


def experiment_toml(
    name: str,
    repeats: int,
    trace_path: str,
    run: Mapping[str, Any],
    engine: Mapping[str, Any],
    engine_kind_table: Mapping[str, Any] | None = None,
    scrape_interval_s: float | None = None,
) -> str:
    """The experiment file of a repeated run (scalars only, so a tiny writer is enough)."""
    lines = [
        "# written by `replay run --repeats`: this run's one point as a sweep",
        f"name = {_toml_value(name)}",
        f"repeats = {repeats}",
        'order = "sequential"',
        "",
        *_table("trace", {"path": str(Path(trace_path).resolve())}),
        "",
        *_table("run", run),
        "",
        *_table("engine", engine),
    ]
    if engine_kind_table:
        lines += ["", *_table(f"engine.{engine['kind']}", engine_kind_table)]
    if scrape_interval_s is not None:
        lines += ["", *_table("timeouts", {"scrape_interval_s": scrape_interval_s})]
    return "\n".join(lines) + "\n"


def run_repeats(
    out_dir: str,
    toml_text: str,
    *,
    force: bool,
    echo: Callable[[str], None],
):
    """Write the experiment file into `out_dir` and run it as a sweep; then write its report.
    Returns (SweepResult, the report's output)."""
    from replay.report import write_report
    from replay.sweep.config import experiment_from_text
    from replay.sweep.results import exclusive_lock, write_bytes_atomic
    from replay.sweep.runner import run_sweep

    out = Path(out_dir)
    if not re.fullmatch(r"[A-Za-z0-9._-]+", out.resolve().name):
        raise ConfigError(
            "run", "--out", "with --repeats the directory name is the experiment name: use "
            f"letters, digits, '.', '_' or '-', got {out.name!r}",
        )  # fmt: skip
    if (out / "run.json").exists() or (out / "calls.jsonl").exists():
        # the single run would sit beside the repeats, and compare read it instead of them
        raise ConfigError(
            str(out), "--out", "holds a single run (run.json); give --repeats a new directory",
        )  # fmt: skip
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "experiment.toml"
    # under the folder's lock, as the sweep's own checks are: a command refused because a
    # sweep is running there rewrote that sweep's experiment file first (the runs' only record
    # of what they ran, and a later resume was then refused as another experiment)
    with exclusive_lock(out.resolve()):
        old = path.read_text() if path.is_file() else None
        if old is not None and old != toml_text and not force:
            raise ConfigError(
                str(path), "--out", "holds repeats of another command line; pass --force to "
                "start over, or choose a new directory",
            )  # fmt: skip
        # checked before it is kept: a refused trace or option wrote the file, and the
        # corrected command was then refused as another command line
        try:
            exp = experiment_from_text(toml_text, path)
        except ConfigError:
            if created:
                shutil.rmtree(out, ignore_errors=True)  # holds only the lock's file
            raise
        write_bytes_atomic(path, toml_text.encode())
    # the sweep takes the lock again (flock: a second hold in one process would refuse itself)
    result = run_sweep(exp, force=force, results_root=out.resolve().parent, echo=echo)
    report = write_report(result.exp_dir, figures=True)
    return result, report


def interval_lines(exp_dir: Path, metrics: tuple[str, ...] = HEADLINE_METRICS) -> list[str]:
    """Mean, 95% t-interval and n per headline metric over the ok repeats (summary.parquet), as
    the report counts them: a repeat that ended with errors is left out, and said to be."""
    import pandas as pd

    from replay.analysis.aggregate import describe

    table = pd.read_parquet(exp_dir / "summary.parquet")
    ok = table[table["status"] == "ok"]
    left_out = len(table) - len(ok)
    note = f"{left_out} of {len(table)} repeats did not end ok and are left out (report.md)"
    if ok.empty:
        return [f"no repeat ended ok: no intervals ({note})"]
    lines = [f"{'metric':<26}{'mean':>14}{'95% interval':>30}{'n':>4}"]
    for m in metrics:
        if m not in ok.columns:
            continue
        st = describe(pd.to_numeric(ok[m], errors="coerce").tolist())
        if st.n == 0:
            continue
        ci = "-" if math.isnan(st.ci_low) else f"[{st.ci_low:.6g}, {st.ci_high:.6g}]"
        lines.append(f"{m:<26}{st.mean:>14.6g}{ci:>30}{st.n:>4}")
    if left_out:
        lines.append(note)
    return lines
