"""The report's run status, "what is real" comparisons and provenance."""

from __future__ import annotations

import pandas as pd

from replay import __version__
from replay.analysis.compare import (
    METHOD,
    NO_DATA,
    REAL,
    SINGLE_REPEAT,
    WITHIN_NOISE,
    default_baselines,
    missing_baselines,
)
from replay.analysis.load import load_calls
from replay.analysis.words import comparison_sentence, fmt_point
from replay.report.analyse import Analysis
from replay.report.markdown import count, md_table, plain, text

__all__ = ["what_is_real", "failures", "not_started_line", "provenance"]


def _noise_free(a: Analysis) -> bool:
    """True when every point with two or more repeats has zero spread in makespan."""
    spread = a.agg[(a.agg["metric"] == "makespan_s") & (a.agg["n"] >= 2)]
    return not spread.empty and bool(
        (spread["std"].abs() <= 1e-12 * spread["mean"].abs().clip(lower=1.0)).all()
    )


def what_is_real(a: Analysis) -> list[str]:
    c = a.comparisons
    # every factor the design gives a baseline, also one whose baseline finished nowhere (it
    # has no comparison row, only a "Not compared" line)
    baselines = default_baselines(a.design, a.params)
    gaps = {f: _not_compared(a, f, b) for f, b in baselines.items()}
    unfinished = _unfinished_points(a)
    if c.empty and not any(gaps.values()) and not unfinished:
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
    # counted as the sentences read: no data, or a baseline of 0, is "cannot be compared"
    judged = (
        (c["verdict"] != NO_DATA) & pd.to_numeric(c["rel_diff"], errors="coerce").notna()
        if not c.empty
        else pd.Series(dtype=bool)
    )
    counts = c.loc[judged, "verdict"].value_counts() if not c.empty else pd.Series(dtype=int)
    unjudged = int((~judged).sum())
    tally = ", ".join(f"{counts.get(v, 0)} {v}" for v in (REAL, WITHIN_NOISE, SINGLE_REPEAT))
    tally += f", {unjudged} cannot be compared" if unjudged else ""
    lines += [tally + ".", ""]
    if unfinished:  # no line below mentions them: no run of theirs to compare
        lines += [
            "Not in any comparison, since none of their runs finished (see Runs): "
            + "; ".join(unfinished)
            + ".",
            "",
        ]
    # a comparison of repeats with no spread on either side is exact, not a test: it cannot be
    # called real by chance (the 0 GiB points of every admission are one run, for example)
    decided = c[judged & c["verdict"].isin([REAL, WITHIN_NOISE])] if not c.empty else c
    n_exact = int((decided["diff_low"] == decided["diff_high"]).sum()) if not c.empty else 0
    tested = len(decided) - n_exact
    if tested >= 10 and not _noise_free(a):
        also = (
            f" ({n_exact} more compare repeats with no spread on either side: exact, not tests)"
            if n_exact
            else ""
        )
        lines += [
            f"{tested} comparisons were tested, each at α = 0.05 and none corrected for the "
            f"others{also}: if nothing differed, about {tested * 0.05:.0f} of them would still "
            "be called real by chance. Weigh a small real difference that stands alone "
            "accordingly.",
            "",
        ]
    for factor, baseline in baselines.items():
        group = c[c["factor"] == factor] if not c.empty else c
        if group.empty and not gaps[factor]:
            continue
        lines += [f"**{factor}** (baseline {factor}={plain(baseline)})", ""]
        others = [p for p in a.params if p != factor and p in group.columns]
        group = group.assign(_rank=group["verdict"].map(rank).fillna(3)).sort_values(
            ["_rank", "metric"], kind="stable"
        )
        for _, row in group.iterrows():
            fields = {str(k): v for k, v in row.items()}
            lines.append("- " + comparison_sentence(fields, {k: row[k] for k in others}))
        lines += gaps[factor]
        lines.append("")
    return lines


def _unfinished_points(a: Analysis) -> list[str]:
    """The planned points of a sweep with more than one point where no run finished `ok`."""
    cols = [p for p in a.params if p in a.design.columns]
    if not cols:
        return []
    points = a.design[cols].drop_duplicates()
    if len(points) < 2:
        return []

    done = {fmt_point(dict(zip(cols, r, strict=True))) for r in a.ok[cols].itertuples(index=False)}
    every = (fmt_point(dict(zip(cols, r, strict=True))) for r in points.itertuples(index=False))
    return [point for point in every if point not in done]


def _not_compared(a: Analysis, factor: str, baseline: object) -> list[str]:
    """Settings at which no baseline run finished: those points have no line above."""
    gaps = missing_baselines(a.ok, a.params, factor, baseline, a.design)
    if not gaps:
        return []
    where = "; ".join(fmt_point(at) or "every setting" for at in gaps)
    return [
        f"- Not compared, since no {factor}={plain(baseline)} run finished there "
        f"(see Runs): at {where}."
    ]


def failures(a: Analysis) -> list[str]:
    bad = a.runs[a.runs["status"] != "ok"]
    total = len(a.runs)
    if bad.empty:
        return [
            f"{'All ' if total > 1 else ''}{count(total, 'run')} finished with status `ok`.",
            "",
        ]
    lines = [
        f"**{len(bad)} of {total} runs did not finish cleanly** and are left out of every statistic below "
        "(a point with fewer repeats has a wider interval, or none).",
        "",
    ]
    rows = []
    for _, r in bad.iterrows():
        why = r.get("error")
        why = why if isinstance(why, str) else ""  # a run with no run.json has NaN here
        tail = r.get("log_tail")
        if isinstance(tail, str) and tail.strip():
            why = (
                f"{why} — log: {tail.strip().splitlines()[-1]}"
                if why
                else f"log: {tail.strip().splitlines()[-1]}"
            )
        calls = r.get("calls")
        if (calls is None or pd.isna(calls)) and isinstance(r.get("run_dir"), str):
            calls = len(load_calls(r["run_dir"]))  # no summary: count what the driver streamed
        rows.append(
            [
                r["point"] or "-",
                r["repeat"],
                r["status"],
                "-" if calls is None or pd.isna(calls) else int(calls),
                text(str(why)[:200]) or "-",
            ]
        )
    return lines + md_table(["point", "repeat", "status", "calls done", "why"], rows)


_LISTED_POINTS = 20  # points named one by one; past that the count says the rest


def not_started_line(
    missing: list[str], planned: int, left_out: tuple[tuple[str, str], ...] = ()
) -> list[str]:
    """A warning when a sweep's plan lists runs that have no directory yet, naming them by
    point; and the run folders left out as another sweep's (they count as neither)."""
    lines: list[str] = []
    if missing:
        by_point: dict[str, list[str]] = {}
        for rel in missing:
            point, _, repeat = rel.rpartition("/")
            by_point.setdefault(point, []).append(repeat)
        named = [f"- `{p}`: {', '.join(r)}" for p, r in list(by_point.items())[:_LISTED_POINTS]]
        if len(by_point) > _LISTED_POINTS:
            named.append(f"- and {len(by_point) - _LISTED_POINTS} more points")
        lines += [
            f"**{len(missing)} of {planned} planned runs never started** (rerun the sweep):",
            "",
            *named,
            "",
        ]
    if left_out:
        lines += [
            f"**{count(len(left_out), 'run folder')} left out**, not this sweep's runs:",
            "",
            *(f"- `{rel}`: {text(why)}" for rel, why in left_out),
            "",
        ]
    return lines


def provenance(a: Analysis) -> list[str]:
    runs = a.runs
    rows = []
    for col, label in (
        ("engine", "engine"),
        ("engine_version", "engine version"),
        ("gpu", "GPU"),
        ("trace_sha256", "trace sha256"),
        ("git_revision", "git revision"),
        ("host", "host"),
        ("node", "nodes"),
    ):
        values = sorted({str(v) for v in runs[col].dropna()}) if col in runs.columns else []
        if col == "node" and not values:
            continue  # results from before sweeps recorded nodes keep their report unchanged
        rows.append([label, ", ".join(values) if values else "not recorded"])
    if "started_at" in runs.columns and runs["started_at"].notna().any():
        end = (
            runs["ended_at"].dropna().max()
            if "ended_at" in runs.columns and runs["ended_at"].notna().any()
            else "?"
        )
        rows.append(["runs from / to", f"{runs['started_at'].dropna().min()} / {end}"])
    rows.append(["report", f"replay {__version__}"])
    lines = md_table(["", "value"], rows)
    if a.results.notes:
        lines += ["Loader notes:", "", *(f"- {text(n)}" for n in a.results.notes), ""]
    return lines
