"""`report.md` and `figures/` for one results directory: tables with intervals, predictions and
their errors, figures, and a generated "what is real" section.

Analysis is pure (`replay.analysis`); this module is the edge that reads calls, draws, writes files
and asks the wall clock for a date only when the runs carry none.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from replay import __version__
from replay.analysis.aggregate import aggregate
from replay.analysis.compare import METHOD, REAL, SINGLE_REPEAT, WITHIN_NOISE, all_comparisons
from replay.analysis.derived import (
    DERIVED_METRICS,
    TIER_PARAM,
    add_derived,
    pressure_ratio,
    recorded_makespan_s,
)
from replay.analysis.load import Results, load_calls, load_results
from replay.analysis.predictions import (
    PREDICTED_QUANTITIES,
    compare_predictions,
    prediction_groups,
    prediction_table,
    skipped_predictions,
    working_set_by_run,
)
from replay.analysis.words import (
    METRIC_NAMES,
    comparison_sentence,
    fmt_interval,
    fmt_num,
    fmt_point,
)
from replay.errors import ReplayError
from replay.plots import (
    FigureContext,
    engine_comparison,
    hits_vs_pressure,
    makespan_vs_tier,
    prefill_vs_tier,
    restores_writes_vs_tier,
    save_figure,
    slot_timeline,
    ttft_cdf,
    ttft_s,
)
from replay.trace.io import iter_calls

__all__ = ["ReportOutput", "build_report", "write_report"]

REPORT_NAME = "report.md"
FIGURES_DIR = "figures"
# Comparisons that go into "what is real": every factor on these metrics.
VERDICT_METRICS = ("makespan_s", "computed_prefill_tokens")
TIME_COLUMNS = (
    "makespan_s",
    "relative_makespan",
    "slowdown_vs_recorded",
    "ttft_p50_s",
    "ttft_p99_s",
    "jct_p50_s",
)
TOKEN_COLUMNS = (
    "computed_prefill_tokens",
    "host_restore_tokens",
    "host_write_tokens",
    "write_read_ratio",
    "device_hit_fraction",
    "host_hit_fraction",
    "evicted_unread_fraction",
)
# Scalars of a prediction printed above its table, when present.
PREDICTION_FACTS = (
    "model",
    "order",
    "pool",
    "calls",
    "prompt_tokens",
    "mean_prompt_tokens",
    "bytes_per_token",
    "chunk_tokens",
    "device_tokens",
    "working_set_gib",
    "offload_pays_from_gib",
)
MAX_TTFT_RUNS = 60  # beyond this, TTFT CDFs use the first repeat of each point only


@dataclass
class ReportOutput:
    """What `write_report` produced: the markdown path, figure files, and figures not drawn (why)."""

    report: Path
    figures: list[Path] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


def _numeric_columns(runs: pd.DataFrame) -> list[str]:
    skip = {"repeat", "point", "status", "run_dir", "experiment"}
    cols = []
    for c in runs.columns:
        if c in skip:
            continue
        values = pd.to_numeric(runs[c], errors="coerce")
        if (
            values.notna().any()
            and runs[c].map(lambda v: isinstance(v, (int, float, np.number)) or v is None).all()
        ):
            cols.append(c)
    return cols


@dataclass
class _Analysis:
    results: Results
    params: list[str]
    runs: pd.DataFrame  # every run, derived columns added
    ok: pd.DataFrame  # runs counted in the statistics
    agg: pd.DataFrame
    predicted: pd.DataFrame
    pred_errors: pd.DataFrame
    comparisons: pd.DataFrame
    working_sets: list[float]


def _analyse(results: Results) -> _Analysis:
    params = list(results.params)
    runs = results.runs
    if "engine" not in params and "engine" in runs.columns and runs["engine"].nunique() > 1:
        params.append("engine")  # engines differ without being a matrix key: compare them too
    predicted = (
        prediction_table(results.predictions) if results.predictions is not None else pd.DataFrame()
    )
    if "recorded_makespan_s" not in runs.columns:
        runs = runs.assign(recorded_makespan_s=_recorded_makespans(runs))
    runs = add_derived(runs, params)
    runs["working_set_gib"] = working_set_by_run(runs, predicted, params)
    if TIER_PARAM in runs.columns:
        runs["pressure_ratio"] = pressure_ratio(runs["working_set_gib"], runs[TIER_PARAM])
    ok = runs[runs["status"] == "ok"]
    metrics = [c for c in _numeric_columns(runs) if c not in params]
    agg = aggregate(ok, params, metrics)
    pred_errors = compare_predictions(predicted, agg, params)
    comparisons = all_comparisons(ok, params, VERDICT_METRICS)
    ws = sorted({float(w) for w in runs["working_set_gib"].dropna().unique()})
    return _Analysis(results, params, runs, ok, agg, predicted, pred_errors, comparisons, ws)


def _recorded_makespans(runs: pd.DataFrame) -> pd.Series:
    """Per run, how long the recorded run of its trace took, when the trace file is still where
    the run read it and has recorded call timings (NaN otherwise)."""
    cache: dict[str, float | None] = {}
    out = []
    for prov in runs.get("provenance", pd.Series([{}] * len(runs), index=runs.index)):
        path = prov.get("trace") if isinstance(prov, dict) else None
        if isinstance(path, str) and path not in cache:
            cache[path] = None
            # An unreadable trace only costs this one column.
            with contextlib.suppress(ReplayError, OSError):
                if Path(path).is_file():
                    calls = (c for _, c in iter_calls(path) if c is not None)
                    cache[path] = recorded_makespan_s(c.recorded for c in calls)
        value = cache.get(path) if isinstance(path, str) else None
        out.append(np.nan if value is None else value)
    return pd.Series(out, index=runs.index, dtype=float)


def _run_date(runs: pd.DataFrame, today: Callable[[], dt.date]) -> str:
    if "started_at" in runs.columns:
        starts = sorted(str(s) for s in runs["started_at"].dropna())
        if starts:
            return starts[0][:10]
    return today().isoformat()


def _representative_run(ok: pd.DataFrame) -> pd.Series | None:
    """The finished run whose makespan is closest to the median of all finished runs."""
    if ok.empty:
        return None
    if "makespan_s" not in ok.columns or ok["makespan_s"].isna().all():
        return ok.iloc[0]
    makespan = pd.to_numeric(ok["makespan_s"], errors="coerce")
    return ok.loc[(makespan - makespan.median()).abs().idxmin()]  # type: ignore[call-overload]


def _draw_figures(
    a: _Analysis, ctx: FigureContext, out_dir: Path
) -> tuple[list[tuple[str, str, list[Path]]], dict[str, str]]:
    drawn: list[tuple[str, str, list[Path]]] = []
    skipped: dict[str, str] = {}

    def keep(stem: str, caption: str, fig: Any, why_not: str) -> None:
        if fig is None:
            skipped[caption] = why_not
            return
        drawn.append((stem, caption, save_figure(fig, out_dir, stem)))

    no_tier = f"the sweep does not vary `{TIER_PARAM}` (or no run finished)"
    keep(
        "1_makespan_vs_tier",
        "Figure 1: makespan vs host tier",
        makespan_vs_tier(a.agg, a.params, ctx, a.working_sets),
        no_tier,
    )
    keep(
        "2_prefill_vs_tier",
        "Figure 2: computed prefill vs host tier, measured and predicted",
        prefill_vs_tier(a.agg, a.params, ctx, a.predicted),
        no_tier,
    )
    keep(
        "3_restores_writes_vs_tier",
        "Figure 3: host restores and writes, write:read ratio",
        restores_writes_vs_tier(a.agg, a.params, ctx),
        no_tier + " or no host counters",
    )
    keep(
        "4_hits_vs_pressure",
        "Figure 4: hit fractions vs pressure ratio",
        hits_vs_pressure(a.agg, a.params, ctx),
        "no working-set prediction, host tier or hit counters",
    )

    rep = _representative_run(a.ok)
    fig5 = None
    if rep is not None:
        label = f"{rep['point'] or 'run'} / {rep['repeat']}"
        fig5 = slot_timeline(load_calls(rep["run_dir"]), ctx, label)
    keep(
        "5_slot_timeline",
        "Figure 5: per-slot timeline of the median-makespan run",
        fig5,
        "no finished run with per-call timings",
    )

    ttft: dict[str, np.ndarray] = {}
    runs = a.ok if len(a.ok) <= MAX_TTFT_RUNS else a.ok.drop_duplicates("point")
    keys = [p for p in a.params if p in runs.columns]
    runs = runs.sort_values(keys, kind="stable") if keys else runs
    for point, group in runs.groupby("point", sort=False):
        ttft[str(point) or "run"] = np.concatenate(
            [ttft_s(load_calls(d)) for d in group["run_dir"]]
        )
    keep(
        "6_ttft_cdf",
        "Figure 6: TTFT distribution per point",
        ttft_cdf(ttft, ctx),
        "no per-call TTFT",
    )
    keep(
        "7_engines",
        "Figure 7: engines at matched configuration",
        engine_comparison(a.agg, a.params, ctx),
        "fewer than two engines ran a matched configuration",
    )
    return drawn, skipped


def _md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return lines + [""]


def _points(a: _Analysis) -> pd.DataFrame:
    keys = [p for p in a.params if p in a.agg.columns]
    if a.agg.empty:
        return pd.DataFrame(columns=keys)
    return a.agg[keys].drop_duplicates().reset_index(drop=True) if keys else pd.DataFrame(index=[0])


def _stat(a: _Analysis, point: pd.Series, metric: str) -> pd.Series | None:
    sel = a.agg["metric"] == metric
    for k, v in point.items():
        sel &= (a.agg[k] == v) | (a.agg[k].isna() & pd.isna(v))
    hit = a.agg[sel]
    return None if hit.empty else hit.iloc[0]


def _measured_tables(a: _Analysis) -> list[str]:
    lines: list[str] = []
    points = _points(a)
    if a.agg.empty:
        return ["No run finished cleanly: nothing to aggregate.", ""]
    present = set(a.agg["metric"])
    for title, candidates in (("Time", TIME_COLUMNS), ("Tokens", TOKEN_COLUMNS)):
        columns = [c for c in candidates if c in present]
        if not columns:
            continue
        header = [*points.columns, "n", *(METRIC_NAMES.get(c, c) for c in columns)]
        rows = []
        for _, point in points.iterrows():
            stats = [_stat(a, point, c) for c in columns]
            n = max((int(s["n"]) for s in stats if s is not None), default=0)
            cells = [
                fmt_interval(s["mean"], s["half_width"], s["n"], s["min"], s["max"])
                if s is not None
                else "-"
                for s in stats
            ]
            rows.append([*(_plain(v) for v in point.to_numpy()), n, *cells])
        lines += [f"**{title}** (mean ± 95% t-interval half-width [min–max] over repeats)", ""]
        lines += _md_table(header, rows)
    cv = a.agg[a.agg["metric"] == "makespan_s"]["cv"].dropna()
    if not cv.empty:
        lines += [
            f"Makespan coefficient of variation across repeats: median {cv.median() * 100:.2f}%, max {cv.max() * 100:.2f}%.",
            "",
        ]
    return lines


def _plain(v: Any) -> str:
    return fmt_point({"": v})[1:]


def _predictions_section(a: _Analysis) -> list[str]:
    if a.results.predictions is None:
        return ["No `predictions.json` in this results directory: nothing was pre-registered.", ""]
    skipped = [f"- not predicted: {why}" for why in skipped_predictions(a.results.predictions)]
    skipped += [""] if skipped else []
    if a.predicted.empty:
        return [
            "`predictions.json` is present but holds no per-tier prediction this report can read.",
            "",
            *skipped,
        ]
    lines = [
        "Registered before any point ran (`predictions.json`); a run never rewrites it.",
        "",
        *skipped,
    ]
    for params, pred in prediction_groups(a.results.predictions):
        facts = [f"{k} {_fact(pred[k])}" for k in PREDICTION_FACTS if pred.get(k) is not None]
        lines += [f"**{fmt_point(params) or 'all points'}**: " + ", ".join(facts) + ".", ""]
        tiers = [t for t in pred["tiers"] if isinstance(t, dict)]
        cols = [
            c
            for c in (TIER_PARAM, "pressure_ratio", *PREDICTED_QUANTITIES)
            if any(c in t for t in tiers)
        ]
        lines += _md_table(cols, [[fmt_num(t.get(c)) for c in cols] for t in tiers])
    return lines


def _fact(v: Any) -> str:
    if isinstance(v, (int, float, np.number)) and not isinstance(v, bool):
        return fmt_num(v)
    return str(v)


def _prediction_errors(a: _Analysis) -> list[str]:
    e = a.pred_errors
    if e.empty:
        return [
            "No measured point matches a prediction (tier and group parameters), so no errors to show.",
            "",
        ]
    keys = [c for c in e.columns if c in a.params]
    header = [*keys, "quantity", "predicted [range]", "measured (95% CI)", "n", "error", "agrees"]
    rows = []
    for _, r in e.iterrows():
        inside = "-" if pd.isna(r["within_interval"]) else ("yes" if r["within_interval"] else "no")
        low, high = r.get("predicted_low", math.nan), r.get("predicted_high", math.nan)
        span = "" if pd.isna(low) or pd.isna(high) else f" [{fmt_num(low)}–{fmt_num(high)}]"
        measured = fmt_num(r["measured"]) + (
            "" if pd.isna(r["ci_low"]) else f" [{fmt_num(r['ci_low'])}–{fmt_num(r['ci_high'])}]"
        )
        err = "-" if pd.isna(r["rel_error"]) else f"{r['rel_error'] * 100:+.1f}%"
        rows.append(
            [
                *(_plain(r[k]) for k in keys),
                r["quantity"],
                fmt_num(r["predicted"]) + span,
                measured,
                int(r["n"]),
                err,
                inside,
            ]
        )
    lines = [
        "Error = (point prediction − measured) / measured. Agrees: the pre-registered range "
        "overlaps the measured 95% interval (docs/model.md, Ranges); a prediction without a range: "
        "the point lies inside the interval.",
        "",
    ]
    return lines + _md_table(header, rows)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _noise_free(a: _Analysis) -> bool:
    """True when every point with two or more repeats has zero spread in makespan."""
    spread = a.agg[(a.agg["metric"] == "makespan_s") & (a.agg["n"] >= 2)]
    return not spread.empty and bool(
        (spread["std"].abs() <= 1e-12 * spread["mean"].abs().clip(lower=1.0)).all()
    )


def _what_is_real(a: _Analysis) -> list[str]:
    c = a.comparisons
    if c.empty:
        return ["No two configurations to compare (a single point, or no finished runs).", ""]
    lines = [
        f"Each configuration against its baseline at otherwise equal settings, {METHOD} (two-sided, α = 0.05) "
        "on the repeats. ± is the 95% interval of the difference, relative to the baseline mean. "
        "A point with one repeat is never called real.",
        "",
    ]
    if _noise_free(a):
        lines += [
            "Every point's repeats are identical (a deterministic engine, such as the simulator): "
            "each difference below is exact, and the repeats say nothing about run-to-run noise "
            "on a real server.",
            "",
        ]
    rank = {REAL: 0, WITHIN_NOISE: 1, SINGLE_REPEAT: 2}
    counts = c["verdict"].value_counts()
    lines += [
        ", ".join(f"{counts.get(v, 0)} {v}" for v in (REAL, WITHIN_NOISE, SINGLE_REPEAT)) + ".",
        "",
    ]
    for factor, group in c.groupby("factor", sort=False):
        lines += [f"**{factor}** (baseline {factor}={_plain(group['baseline'].iloc[0])})", ""]
        others = [p for p in a.params if p != factor and p in group.columns]
        group = group.assign(_rank=group["verdict"].map(rank).fillna(3)).sort_values(
            ["_rank", "metric"], kind="stable"
        )
        for _, row in group.iterrows():
            fields = {str(k): v for k, v in row.items()}
            lines.append("- " + comparison_sentence(fields, {k: row[k] for k in others}))
        lines.append("")
    return lines


def _failures(a: _Analysis) -> list[str]:
    bad = a.runs[a.runs["status"] != "ok"]
    total = len(a.runs)
    if bad.empty:
        return [
            f"{'All ' if total > 1 else ''}{_count(total, 'run')} finished with status `ok`.",
            "",
        ]
    lines = [
        f"**{len(bad)} of {total} runs did not finish cleanly** and are left out of every statistic below "
        "(a point with fewer repeats has a wider interval, or none).",
        "",
    ]
    rows = []
    for _, r in bad.iterrows():
        why = r.get("error") or ""
        tail = r.get("log_tail")
        if isinstance(tail, str) and tail.strip():
            why = (
                f"{why} — log: {tail.strip().splitlines()[-1]}"
                if why
                else f"log: {tail.strip().splitlines()[-1]}"
            )
        calls = r.get("calls")
        if calls is None or pd.isna(calls):
            calls = len(load_calls(r["run_dir"]))  # no summary: count what the driver streamed
        rows.append(
            [
                r["point"] or "-",
                r["repeat"],
                r["status"],
                int(calls),
                str(why)[:200] or "-",
            ]
        )
    return lines + _md_table(["point", "repeat", "status", "calls done", "why"], rows)


def _not_started_line(missing: int, planned: int) -> list[str]:
    if not missing:
        return []
    return [f"**{missing} of {planned} planned runs never started** (rerun the sweep).", ""]


def _provenance(a: _Analysis) -> list[str]:
    runs = a.runs
    rows = []
    for col, label in (
        ("engine", "engine"),
        ("engine_version", "engine version"),
        ("gpu", "GPU"),
        ("trace_sha256", "trace sha256"),
        ("git_revision", "git revision"),
        ("host", "host"),
    ):
        values = sorted({str(v) for v in runs[col].dropna()}) if col in runs.columns else []
        rows.append([label, ", ".join(values) if values else "not recorded"])
    if "started_at" in runs.columns and runs["started_at"].notna().any():
        end = (
            runs["ended_at"].dropna().max()
            if "ended_at" in runs.columns and runs["ended_at"].notna().any()
            else "?"
        )
        rows.append(["runs from / to", f"{runs['started_at'].dropna().min()} / {end}"])
    rows.append(["report", f"replay {__version__}"])
    lines = _md_table(["", "value"], rows)
    if a.results.notes:
        lines += ["Loader notes:", "", *(f"- {n}" for n in a.results.notes), ""]
    return lines


def build_report(
    results: Results,
    out_dir: Path,
    *,
    today: Callable[[], dt.date] | None = None,
    figures: bool = True,
) -> tuple[str, ReportOutput]:
    """The markdown text and the figures (written under `out_dir/figures`)."""
    today = today or (lambda: dt.datetime.now(dt.UTC).date())
    a = _analyse(results)
    ctx = FigureContext(results.experiment, _run_date(a.runs, today))
    drawn, skipped = _draw_figures(a, ctx, out_dir / FIGURES_DIR) if figures else ([], {})
    n_ok = len(a.ok)
    lines = [
        f"# {results.experiment}: replay report",
        "",
        f"{_count(len(a.runs), 'run')} ({n_ok} ok) over {_count(a.runs['point'].nunique(), 'point')}, "
        f"run {ctx.date}. "
        f"Matrix: {', '.join(f'`{p}`' for p in a.params) or 'single point'}.",
        "",
        "## Runs",
        "",
        *_failures(a),
        *_not_started_line(len(results.not_started), len(results.planned)),
        "## What is real",
        "",
        *_what_is_real(a),
        "## Measured",
        "",
        *_measured_tables(a),
        "## Predictions (pre-registered)",
        "",
        *_predictions_section(a),
        "## Prediction vs measurement",
        "",
        *(_prediction_errors(a) if not a.predicted.empty else ["Nothing to compare.", ""]),
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
    derived = ", ".join(
        f"`{k}` = {fn.__doc__.split(':')[0]}"
        for k, (fn, _) in DERIVED_METRICS.items()
        if fn.__doc__
    )
    lines += [
        "## Provenance",
        "",
        *_provenance(a),
        "## Definitions",
        "",
        f"Derived: {derived}; `relative_makespan` = makespan / mean makespan of the smallest host tier "
        "(the no-offload point when the sweep has 0 GiB); `pressure_ratio` = predicted working set / host tier.",
        "",
        "## Experiment file",
        "",
    ]
    if results.experiment_toml is not None:
        lines += ["```toml", results.experiment_toml.rstrip(), "```", ""]
    else:
        lines += ["`experiment.toml` not found in the results directory.", ""]
    out = ReportOutput(
        report=out_dir / REPORT_NAME, figures=[p for _, _, ps in drawn for p in ps], skipped=skipped
    )
    return "\n".join(lines), out


def write_report(
    results_dir: str | Path, *, today: Callable[[], dt.date] | None = None, figures: bool = True
) -> ReportOutput:
    """Write `RESULTS_DIR/report.md` and `RESULTS_DIR/figures/*.png|svg` (atomically)."""
    root = Path(results_dir)
    results = load_results(root)
    text, out = build_report(results, root, today=today, figures=figures)
    tmp = root / f".{REPORT_NAME}.tmp"
    tmp.write_text(text)
    tmp.replace(out.report)
    return out
