"""The report's "Simulated vs measured" section: a simulated sweep set point by point beside the
measured one it stands for (`replay report MEASURED --vs SIMULATED`).

Points pair by name (`host_tier_gib=0.00390625`): a calibrated twin (`[engine] kind = "sim"` with
`costs` and `personality`) keeps the measured sweep's matrix, so its points carry the same names.
Each quantity's error is (simulated mean - measured mean) / measured mean; a fraction's is the
difference of the two. "Inside" says whether the simulated mean lies in the measured 95% interval.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from replay.analysis.aggregate import describe
from replay.analysis.load import Results
from replay.analysis.words import METRIC_NAMES, fmt_num
from replay.errors import ConfigError
from replay.report.markdown import md_table

__all__ = ["SIMULATED_QUANTITIES", "SIM_ENGINES", "check_simulated", "simulated_section"]

# (column, is a fraction: its error is a difference, not a ratio)
SIMULATED_QUANTITIES = (
    ("makespan_s", False),
    ("ttft_p50_s", False),
    ("computed_prefill_tokens", False),
    ("host_restore_tokens", False),
    ("device_hit_fraction", True),
)
SIM_ENGINES = ("sim", "sim-server")


def check_simulated(sim: Results) -> None:
    """ConfigError unless every run of `sim` ran on the simulator: the section would mislabel a
    second real sweep as simulated."""
    engines = {str(e) for e in sim.runs.get("engine", pd.Series(dtype=object)).dropna()}
    if not engines:
        raise ConfigError(str(sim.root), "--vs", "no runs found: give a simulated sweep's results")
    real = sorted(engines - set(SIM_ENGINES))
    if real:
        raise ConfigError(
            str(sim.root),
            "--vs",
            f"its runs used engine {', '.join(real)}, not the simulator; give the results of a "
            '[engine] kind = "sim" sweep (replay compare sets two real sweeps side by side)',
        )


def _ok(runs: pd.DataFrame) -> pd.DataFrame:
    return runs[runs["status"] == "ok"]


def _error(sim_mean: float, meas_mean: float, fraction: bool) -> str:
    if math.isnan(sim_mean) or math.isnan(meas_mean):
        return "-"
    if fraction:
        return f"{sim_mean - meas_mean:+.3f}"
    return "-" if meas_mean == 0 else f"{(sim_mean - meas_mean) / meas_mean * 100:+.1f}%"


def simulated_section(
    measured_runs: pd.DataFrame, simulated_runs: pd.DataFrame, vs: Path
) -> list[str]:
    """Markdown lines: one row per (point, quantity) both sweeps have, and the points only one has.
    Both frames are run tables with derived columns (`replay.report.analyse`)."""
    meas, sim = _ok(measured_runs), _ok(simulated_runs)
    meas_points = list(dict.fromkeys(measured_runs["point"]))
    sim_points = set(simulated_runs["point"])
    lines = [
        f"Simulated: `{vs}`. Error = (simulated − measured) / measured, of the means over each "
        "point's finished runs (a fraction's error is the difference). Inside: the simulated mean "
        "lies in the measured 95% interval.",
        "",
    ]
    from replay.analysis.trace_ids import short_shas, traces_of

    seen_m = traces_of(measured_runs.get("run_dir", []))
    seen_s = traces_of(simulated_runs.get("run_dir", []))
    if seen_m and seen_s and seen_m != seen_s:
        lines += [
            f"**The two sweeps replayed different traces** (sha256 {short_shas(seen_m)} measured, "
            f"{short_shas(seen_s)} simulated): the errors below are the "
            "workload's as much as the simulator's.",
            "",
        ]
    rows = []
    unreported: dict[str, None] = {}  # quantities no measured run gave (ordered set)
    unfinished: list[str] = []  # points with no finished measured run: nothing to compare
    for point in meas_points:
        if point not in sim_points:
            continue
        m_pt, s_pt = meas[meas["point"] == point], sim[sim["point"] == point]
        if m_pt.empty:
            unfinished.append(point)
            continue
        for col, fraction in SIMULATED_QUANTITIES:
            if col not in m_pt.columns or col not in s_pt.columns:
                continue
            m = describe(pd.to_numeric(m_pt[col], errors="coerce").tolist())
            s = describe(pd.to_numeric(s_pt[col], errors="coerce").tolist())
            if m.n == 0 and s.n == 0:
                continue
            if m.n == 0:
                unreported[METRIC_NAMES.get(col, col)] = None
            ci = "" if math.isnan(m.ci_low) else f" [{fmt_num(m.ci_low)}–{fmt_num(m.ci_high)}]"
            inside = (
                "-"
                if math.isnan(m.ci_low) or s.n == 0
                else ("yes" if m.ci_low <= s.mean <= m.ci_high else "no")
            )
            rows.append(
                [
                    point,
                    METRIC_NAMES.get(col, col),
                    fmt_num(s.mean) if s.n else "-",
                    (fmt_num(m.mean) + ci) if m.n else "-",
                    f"{m.n} / {s.n}",
                    _error(s.mean, m.mean, fraction),
                    inside,
                ]
            )
    if rows:
        header = [
            "point",
            "quantity",
            "simulated",
            "measured (95% CI)",
            "runs m / s",
            "error",
            "inside",
        ]
        lines += md_table(header, rows)
        if unreported:
            lines += [
                "Not reported by the measured runs (their engine does not count it; llama.cpp "
                "gives only a call's total reuse, which `replay calibrate` splits with the "
                "whole-prompt model): " + ", ".join(unreported) + ". Their `-` is no measurement, "
                "not a zero.",
                "",
            ]
    elif not unfinished:
        lines += ["No point of the simulated sweep has the name of a measured point.", ""]
    if unfinished:
        lines += [
            "No measured run finished at "
            + ", ".join(f"`{p}`" for p in unfinished)
            + " (see Runs): not compared.",
            "",
        ]
    only_meas = [p for p in meas_points if p not in sim_points]
    only_sim = sorted(sim_points - set(meas_points))
    if only_meas:
        lines += ["Measured, not simulated: " + ", ".join(f"`{p}`" for p in only_meas) + ".", ""]
    if only_sim:
        lines += ["Simulated, not measured: " + ", ".join(f"`{p}`" for p in only_sim) + ".", ""]
    return lines
