"""A partly finished sweep: baselines are chosen and matched on the planned design, not on the
runs that finished, and what could not be compared is named. Before, with every pool-8
baseline run failed, pool-8 points were compared with the pool-4 baseline and called real."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from replay.analysis.load import load_results
from replay.report.analyse import analyse
from replay.report.runs import what_is_real
from tests.report_results_builder import point_name, write_run
from tests.subprocess_helpers import replay_cli

# makespan by (tier, pool): the offload helps more at pool 8, and pool 8 is slower at tier 0
MAKESPAN = {(0, 4): 100.0, (0, 8): 130.0, (8, 4): 80.0, (8, 8): 60.0}


def _sweep(root: Path, failed: set[tuple[int, int]] = frozenset(), unstarted=()) -> Path:
    root.mkdir(parents=True)
    (root / "experiment.toml").write_text('name = "d"\nrepeats = 3\n')
    planned = []
    for (tier, pool), makespan in MAKESPAN.items():
        point = {"host_tier_gib": tier, "pool": pool}
        for r in range(3):
            planned.append(f"{point_name(point)}/r{r}")
            if (tier, pool) in unstarted:
                continue
            summary = {"makespan_s": makespan + r, "calls": 10, "prompt_tokens": 1000,
                       "computed_prefill_tokens": 500}  # fmt: skip
            status = "failed" if (tier, pool) in failed else "ok"
            write_run(root, point, r, summary=summary, status=status, error="boom")
    (root / "plan.json").write_text(json.dumps({"runs": planned}))
    return root


def _tier_rows(a) -> pd.DataFrame:
    c = a.comparisons
    return c[(c["factor"] == "host_tier_gib") & (c["metric"] == "makespan_s")]


def test_the_complete_sweep_compares_each_pool_with_its_own_baseline(tmp_path):
    a = analyse(load_results(_sweep(tmp_path / "d")))
    rows = _tier_rows(a).set_index("pool")
    assert rows.loc[8, "mean_a"] == 131.0 and rows.loc[4, "mean_a"] == 101.0
    rel = a.runs.set_index(["host_tier_gib", "pool", "repeat"])["relative_makespan"]
    assert abs(rel[(8, 8, "r0")] - 60.0 / 131.0) < 1e-12


def test_a_failed_baseline_leaves_its_points_uncompared_and_says_so(tmp_path):
    for name, kw in (("failed", {"failed": {(0, 8)}}), ("unstarted", {"unstarted": {(0, 8)}})):
        a = analyse(load_results(_sweep(tmp_path / name, **kw)))
        rows = _tier_rows(a)
        assert list(rows["pool"]) == [4], name  # pool 8 has no baseline that finished
        assert rows["mean_a"].iloc[0] == 101.0
        rel = a.runs.set_index(["host_tier_gib", "pool", "repeat"])["relative_makespan"]
        assert pd.isna(rel[(8, 8, "r0")]), name  # was 60 / 101, against pool 4's baseline
        text = "\n".join(what_is_real(a))
        assert "Not compared, since no host_tier_gib=0 run finished there" in text
        assert "at pool=8." in text


def test_a_baseline_that_finished_nowhere_is_named_not_dropped(tmp_path):
    """Every tier-0 run failed: the host_tier_gib block vanished from "What is real" (and with
    one factor the section said there was nothing to compare), and the makespan / baseline
    column left the table instead of saying `-`."""
    from replay.report.measured import measured_tables

    a = analyse(load_results(_sweep(tmp_path / "d", failed={(0, 4), (0, 8)})))
    text = "\n".join(what_is_real(a))
    assert "**host_tier_gib** (baseline host_tier_gib=0)" in text
    assert "Not compared, since no host_tier_gib=0 run finished there" in text
    assert "No two configurations" not in text
    table = "\n".join(measured_tables(a))
    assert "makespan / baseline" in table


def test_the_tally_counts_what_the_sentences_say(tmp_path):
    """A comparison printed as "cannot be compared (baseline is 0)" was tallied as real."""
    root = _sweep(tmp_path / "d")
    for r in range(3):  # pool 4's tier-0 computed prefill is 0: no relative difference exists
        path = root / "host_tier_gib=0,pool=4" / f"r{r}" / "run.json"
        doc = json.loads(path.read_text())
        doc["summary"]["computed_prefill_tokens"] = 0
        path.write_text(json.dumps(doc))
    a = analyse(load_results(root))
    lines = what_is_real(a)
    text = "\n".join(lines)
    sentences = [line for line in lines if line.startswith("- ")]
    real = sum("(real;" in line for line in sentences)
    cannot = sum("cannot be compared" in line for line in sentences)
    assert cannot >= 1
    assert f"{real} real, " in text and f", {cannot} cannot be compared." in text


def test_compare_says_which_runs_it_left_out_and_the_level_it_was_asked(tmp_path):
    root = _sweep(tmp_path / "d", failed={(8, 8)})
    (root / "host_tier_gib=0,pool=4" / "r2" / "run.json").write_text(
        (root / "host_tier_gib=0,pool=4" / "r2" / "run.json")
        .read_text()
        .replace('"status": "ok"', '"status": "errors"')
    )
    cp = replay_cli(
        "compare", str(root / "host_tier_gib=0,pool=4"), str(root / "host_tier_gib=8,pool=4"),
        "--alpha", "0.1",
    )  # fmt: skip
    assert cp.returncode == 0, cp.stderr
    assert "host_tier_gib=0,pool=4: left out, not finished with status ok: r2 (errors)" in cp.stderr
    assert "90% interval" in cp.stdout and "95%" not in cp.stdout
    none = replay_cli(
        "compare", str(root / "host_tier_gib=0,pool=4"), str(root / "host_tier_gib=8,pool=8")
    )
    assert none.returncode == 2 and "no finished runs (status ok) here" in none.stderr


def test_a_report_from_the_summary_table_alone_draws_what_it_can(tmp_path):
    """With only summary.parquet (a documented fallback), the figures needing per-call files
    raised KeyError 'run_dir' and no report was written."""
    from replay.report import write_report

    exp = tmp_path / "e"
    exp.mkdir()
    pd.DataFrame(
        {
            "experiment": ["e"] * 4,
            "point": ["host_tier_gib=0"] * 2 + ["host_tier_gib=5"] * 2,
            "repeat": ["r0", "r1"] * 2,
            "host_tier_gib": [0, 0, 5, 5],
            "status": ["ok", "ok", "ok", "failed"],
            "makespan_s": [10.0, 11.0, 7.0, None],
        }
    ).to_parquet(exp / "summary.parquet")
    out = write_report(exp)
    text = out.report.read_text()
    assert out.figures  # the figures drawn from the aggregate table
    assert "makespan" in text and "| host_tier_gib=5 | r1 | failed | - | - |" in text


def test_a_run_without_run_json_has_no_nan_reason(tmp_path):
    root = _sweep(tmp_path / "d")
    (root / "host_tier_gib=8,pool=8" / "r2" / "run.json").unlink()
    (root / "host_tier_gib=8,pool=8" / "r2" / "counters.json").write_text("{}")
    lines = what_is_real(analyse(load_results(root)))  # analyses without it
    assert lines
    from replay.report.runs import failures

    (row,) = [x for x in failures(analyse(load_results(root))) if "| r2 |" in x]
    assert "nan" not in row and row.endswith("| - |")


def test_a_point_with_no_finished_run_keeps_its_row_with_n_0(tmp_path):
    """A point whose every run failed, and one that never started, are rows of the Measured
    table with n = 0 and `-`, not left out of it (they were, though planned)."""
    from replay.report.measured import measured_tables

    a = analyse(load_results(_sweep(tmp_path / "d", failed={(0, 8)}, unstarted=[(8, 8)])))
    text = "\n".join(measured_tables(a))
    table = text.split("**Time**", 1)[1].split("\n\n", 2)[1]
    rows = [r.split("|")[1:-1] for r in table.splitlines()[2:]]
    cells = {(r[0].strip(), r[1].strip()): r for r in rows}
    assert set(cells) == {("0", "4"), ("0", "8"), ("8", "4"), ("8", "8")}
    for missing in (("0", "8"), ("8", "8")):
        assert cells[missing][2].strip() == "0" and cells[missing][3].strip() == "-"
    assert cells[("0", "4")][2].strip() == "3"


def test_a_point_that_never_finished_is_named_among_the_comparisons(tmp_path):
    # a non-baseline point with no finished run used to drop out of "What is real" silently
    for name, kw in (("failed", {"failed": {(8, 8)}}), ("unstarted", {"unstarted": {(8, 8)}})):
        text = "\n".join(what_is_real(analyse(load_results(_sweep(tmp_path / name, **kw)))))
        line = next(x for x in text.splitlines() if x.startswith("Not in any comparison"))
        assert line.endswith(": host_tier_gib=8, pool=8."), (name, line)


def test_the_runs_that_never_started_are_named_by_point(tmp_path):
    from replay.report.runs import not_started_line

    res = load_results(_sweep(tmp_path / "d", unstarted={(8, 8)}))
    lines = not_started_line(res.not_started, len(res.planned), res.left_out)
    assert lines[0].startswith("**3 of 12 planned runs never started**")
    assert "- `host_tier_gib=8,pool=8`: r0, r1, r2" in lines


def test_a_foreign_run_folder_is_left_out_not_counted_as_never_started(tmp_path):
    root = _sweep(tmp_path / "d")
    run = root / "host_tier_gib=8,pool=8" / "r1" / "run.json"
    data = json.loads(run.read_text())
    run.write_text(json.dumps({**data, "experiment": "another"}))
    (root / "plan.json").write_text(json.dumps({**json.loads((root / "plan.json").read_text()),
                                                "experiment": "d"}))  # fmt: skip
    res = load_results(root)
    assert res.not_started == []
    assert res.left_out == (
        ("host_tier_gib=8,pool=8/r1", "its run.json is experiment 'another''s, not 'd''s"),
    )
