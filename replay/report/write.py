"""`report.md` and `figures/` for one results directory: the page in section order, written
atomically. Asks the wall clock for a date only when the runs carry none."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from replay.analysis.derived import DERIVED_METRICS
from replay.analysis.load import Results, load_results
from replay.plots import FigureContext
from replay.report.analyse import Analysis, analyse
from replay.report.figures import draw_figures
from replay.report.markdown import count, fence
from replay.report.measured import measured_tables, prediction_errors, predictions_section
from replay.report.runs import failures, not_started_line, provenance, what_is_real
from replay.report.simulated import check_simulated, simulated_section

__all__ = ["REPORT_NAME", "FIGURES_DIR", "ReportOutput", "build_report", "write_report"]

REPORT_NAME = "report.md"
FIGURES_DIR = "figures"


@dataclass
class ReportOutput:
    """What `write_report` produced: the markdown path, figure files, and figures not drawn (why)."""

    report: Path
    figures: list[Path] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    html: Path | None = None  # report.html, when asked for


def _run_date(runs: pd.DataFrame, today: Callable[[], dt.date]) -> str:
    if "started_at" in runs.columns:
        starts = sorted(str(s) for s in runs["started_at"].dropna())
        if starts:
            return starts[0][:10]
    return today().isoformat()


def build_report(
    results: Results,
    out_dir: Path,
    *,
    today: Callable[[], dt.date] | None = None,
    figures: bool = True,
    vs: Results | None = None,
) -> tuple[str, ReportOutput]:
    """The markdown text and the figures (written under `out_dir/figures`); with `vs` (a simulated
    sweep's results), a "Simulated vs measured" section after the prediction errors."""
    today = today or (lambda: dt.datetime.now(dt.UTC).date())
    a = analyse(results)
    ctx = FigureContext(results.experiment, _run_date(a.runs, today))
    drawn, skipped = draw_figures(a, ctx, out_dir / FIGURES_DIR) if figures else ([], {})
    n_ok = len(a.ok)
    lines = [
        f"# {results.experiment}: replay report",
        "",
        f"{count(len(a.runs), 'run')} ({n_ok} ok) over {count(a.runs['point'].nunique(), 'point')}, "
        f"run {ctx.date}. "
        f"Matrix: {', '.join(f'`{p}`' for p in a.params) or 'single point'}.",
        "",
        "## Runs",
        "",
        *failures(a),
        *not_started_line(results.not_started, len(results.planned), results.left_out),
        "## What is real",
        "",
        *what_is_real(a),
        "## Measured",
        "",
        *measured_tables(a),
        "## Predictions (pre-registered)",
        "",
        *predictions_section(a),
        "## Prediction vs measurement",
        "",
        *(prediction_errors(a) if not a.predicted.empty else ["Nothing to compare.", ""]),
        *(_simulated(a, vs) if vs is not None else []),
        "## Figures",
        "",
    ]
    for _stem, caption, paths in drawn:
        png = next((p for p in paths if p.suffix == ".png"), paths[0])
        svg = next((p for p in paths if p.suffix == ".svg"), None)
        lines += [f"### {caption}", "", f"![{caption}]({FIGURES_DIR}/{png.name})", ""]
        if svg is not None:
            lines += [f"[SVG]({FIGURES_DIR}/{svg.name})", ""]
    if skipped:
        lines += ["Not drawn:", "", *(f"- {cap}: {why}" for cap, why in skipped.items()), ""]
    if not figures:
        lines += ["None drawn: the report was written with `--no-figures`.", ""]
    derived = ", ".join(
        f"`{k}` = {fn.__doc__.split(':')[0]}"
        for k, (fn, _) in DERIVED_METRICS.items()
        if fn.__doc__
    )
    lines += [
        "## Provenance",
        "",
        *provenance(a),
        "## Definitions",
        "",
        f"Derived: {derived}; `relative_makespan` = makespan / mean makespan of the smallest host tier "
        "(the no-offload point when the sweep has 0 GiB); `pressure_ratio` = predicted working set "
        "/ host tier. `computed_prefill_tokens` counts every prompt token the engine computed, so a request "
        "preempted and re-admitted computes part of its prompt again: with `preemptions` > 0 the "
        "computed, device and host fractions can add up to more than 1.",
        "",
        "## Experiment file",
        "",
    ]
    if results.experiment_toml is not None:
        toml = results.experiment_toml.rstrip()
        lines += [f"{fence(toml)}toml", toml, fence(toml), ""]
    else:
        lines += ["`experiment.toml` not found in the results directory.", ""]
    out = ReportOutput(
        report=out_dir / REPORT_NAME, figures=[p for _, _, ps in drawn for p in ps], skipped=skipped
    )
    return "\n".join(lines), out


def _simulated(a: Analysis, vs: Results) -> list[str]:
    sim = analyse(vs)
    return ["## Simulated vs measured", "", *simulated_section(a.runs, sim.runs, vs.root)]


def write_report(
    results_dir: str | Path,
    *,
    today: Callable[[], dt.date] | None = None,
    figures: bool = True,
    html: bool = False,
    vs: str | Path | None = None,
) -> ReportOutput:
    """Write `RESULTS_DIR/report.md` and `RESULTS_DIR/figures/*.png|svg` (atomically); with
    `html`, also the self-contained `report.html` (replay/report/html.py); with `vs`, a simulated
    sweep's results directory, the "Simulated vs measured" section."""
    root = Path(results_dir)
    results = load_results(root)
    simulated = None
    if vs is not None:
        simulated = load_results(Path(vs))
        check_simulated(simulated)  # before anything is written
    text, out = build_report(results, root, today=today, figures=figures, vs=simulated)
    _write_atomic(out.report, text)
    if html:
        from replay.report.html import HTML_NAME, render_html

        out.html = root / HTML_NAME
        page = render_html(text, root, f"{results.experiment}: replay report")
        _write_atomic(out.html, page)
    return out


def _write_atomic(path: Path, text: str) -> None:
    from replay.sweep.results import write_bytes_atomic

    # a failed write (a full disk) leaves no temp file and names the file it meant
    write_bytes_atomic(path, text.encode("utf-8"))
