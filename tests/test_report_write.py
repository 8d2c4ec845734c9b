"""`replay report`: a constructed sweep (with a failed run) gives a readable report.md and figures."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from replay.report import write_report
from tests.report_results_builder import tier_sweep, write_run
from tests.subprocess_helpers import replay_cli

FIGURES = [
    "1_makespan_vs_tier",
    "2_prefill_vs_tier",
    "3_restores_writes_vs_tier",
    "4_hits_vs_pressure",
    "5_slot_timeline",
    "6_ttft_cdf",
]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[Path, str]:
    exp = tier_sweep(tmp_path_factory.mktemp("res") / "tiny")
    out = write_report(exp, today=lambda: dt.date(2030, 1, 1))
    assert out.report == exp / "report.md"
    return exp, out.report.read_text()


def _section(text: str, title: str) -> str:
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def test_failed_run_is_reported_and_left_out(report):
    _, text = report
    runs = _section(text, "Runs")
    assert "1 of 15 runs did not finish cleanly" in runs
    assert (
        "| host_tier_gib=20,admission=all | r2 | failed | 3 | server gone: connection refused for 30 s |"
        in runs
    )
    # The failed repeat is not counted: 20 GiB / all has n = 2 in the measured table.
    measured = _section(text, "Measured")
    assert "| 20 | all | 2 | 61 ± 13 [60–62] |" in measured


def test_what_is_real_separates_a_real_difference_from_noise(report):
    _, text = report
    real = _section(text, "What is real")
    assert "Welch's t-test" in real
    line5 = next(ln for ln in real.splitlines() if "admission=conditioned lowers makespan" in ln)
    assert "at host_tier_gib=5" in line5 and "(real;" in line5
    line20 = next(
        ln for ln in real.splitlines() if "at host_tier_gib=20: the makespan difference" in ln
    )
    assert "within noise" in line20


def test_predictions_and_their_errors(report):
    _, text = report
    pred = _section(text, "Predictions (pre-registered)")
    assert "not predicted: admission=conditioned: model covers admission all only" in pred
    assert "**admission=all**: working_set_gib 8." in pred
    assert "| 5 | 735K | 140K | 400K | 150K |" in pred
    errors = _section(text, "Prediction vs measurement")
    # computed prefill at 5 GiB/all: measured 700K, 701K, 702K -> mean 701K; (735 - 701) / 701 = +4.9%
    assert (
        "| 5 | all | computed_prefill_tokens | 735K | 701K [" in errors
        and "| +4.9% | no |" in errors
    )


def test_figures_embedded_and_written(report):
    exp, text = report
    for stem in FIGURES:
        assert f"](figures/{stem}.png)" in text
        assert (exp / "figures" / f"{stem}.png").stat().st_size > 1000
        assert (exp / "figures" / f"{stem}.svg").stat().st_size > 1000
    assert "Figure 7: engines at matched configuration: fewer than two engines" in text


def test_provenance_and_experiment_file(report):
    _, text = report
    prov = _section(text, "Provenance")
    assert "| trace sha256 | " + "ab" * 32 + " |" in prov
    assert "| git revision | deadbeef |" in prov
    assert "| GPU | not recorded |" in prov
    assert '```toml\nname = "tiny"\nrepeats = 3\n```' in _section(text, "Experiment file")
    assert "run 2026-12-01" in text  # the runs' date, not the wall clock's


def test_sweep_where_every_run_failed_still_renders(tmp_path):
    exp = tmp_path / "dead"
    for tier in (5, 10):
        write_run(
            exp,
            {"host_tier_gib": tier},
            0,
            summary=None,
            status="failed",
            error="engine did not start",
        )
    out = write_report(exp)
    text = out.report.read_text()
    assert "2 of 2 runs did not finish cleanly" in text
    assert "No run finished cleanly: nothing to aggregate." in text
    assert "No `predictions.json`" in text
    assert out.figures == []


def test_cli_writes_report(tmp_path):
    exp = tmp_path / "one"
    write_run(exp, {"host_tier_gib": 5}, 0, summary={"makespan_s": 2.0, "calls": 1})
    (exp / "host_tier_gib=5" / "r0" / "run.json").write_text(
        json.dumps({"status": "ok", "summary": {"makespan_s": 2.0}, "point": {"host_tier_gib": 5}})
    )
    done = replay_cli("report", str(exp), "--no-figures")
    assert done.returncode == 0, done.stderr
    assert "report.md" in done.stdout
    assert (exp / "report.md").read_text().startswith("# one: replay report")


def test_cli_bad_directory_is_one_line_and_exit_2(tmp_path):
    done = replay_cli("report", str(tmp_path / "missing"))
    assert done.returncode == 2
    assert done.stderr.startswith("replay: ") and "Traceback" not in done.stderr
    assert "no such results directory" in done.stderr


def test_identical_repeats_are_called_exact_not_measured(tmp_path):
    exp = tmp_path / "det"
    for tier, makespan in ((0, 100.0), (5, 90.0)):
        for r in range(2):
            write_run(exp, {"host_tier_gib": tier}, r, summary={"makespan_s": makespan})
    text = write_report(exp, figures=False).report.read_text()
    assert "Every point's repeats are identical" in text
    assert (
        "host_tier_gib=5 lowers makespan by 10.0% vs host_tier_gib=0 (real; identical repeats"
        in text
    )


def test_noisy_repeats_get_no_determinism_note(report):
    _, text = report
    assert "Every point's repeats are identical" not in text


def test_slowdown_against_the_recorded_run(tmp_path):
    trace = tmp_path / "t.jsonl"
    lines = [
        {"format": "replay-trace", "version": 1, "tokens": "ids", "vocab_size": 100},
        {
            "task": "a",
            "call": 0,
            "gap_s": 0.0,
            "keep": 0,
            "append": [1, 2, 3],
            "output_len": 2,
            "recorded": {"start_s": 10.0, "end_s": 12.0},
        },
        {
            "task": "a",
            "call": 1,
            "gap_s": 1.0,
            "keep": 5,
            "append": [4],
            "output_len": 2,
            "recorded": {"start_s": 13.0, "end_s": 30.0},
        },
    ]
    trace.write_text("".join(json.dumps(x) + "\n" for x in lines))
    exp = tmp_path / "rec"
    for r, makespan in enumerate((40.0, 40.0)):
        write_run(
            exp,
            {"host_tier_gib": 0},
            r,
            summary={"makespan_s": makespan},
            provenance={"trace": str(trace)},
        )
    text = write_report(exp, figures=False).report.read_text()
    # recorded: 30 - 10 = 20 s; replay 40 s -> 2x
    assert (
        "| host_tier_gib | n | makespan (s) | makespan / baseline | makespan / recorded |" in text
    )
    assert "| 0 | 2 | 40 ± 0 | 1 ± 0 | 2 ± 0 |" in text


def test_an_unreadable_predictions_file_is_named_not_taken_for_none(tmp_path):
    exp = tier_sweep(tmp_path / "tiny")
    (exp / "predictions.json").write_text('{"groups": [')
    text = write_report(exp, figures=False).report.read_text()
    assert "nothing was pre-registered" not in text
    assert "`predictions.json: unreadable (" in text


def test_many_comparisons_say_how_many_would_be_real_by_chance(report):
    _, text = report
    real = _section(text, "What is real")
    assert "10 real, 2 within noise" in real
    assert "12 comparisons were tested, each at α = 0.05 and none corrected" in real
    assert "about 1 of them would still be called real by chance" in real


def test_comparisons_of_repeats_with_no_spread_are_not_counted_as_tests(tmp_path):
    """The 0 GiB points of every admission are one run (no host tier to admit to): comparing
    their identical repeats is exact, and was counted among the tests that could be called
    real by chance."""
    import re

    exp = tmp_path / "z"
    for tier in (0, 5, 20):
        for admission in ("all", "conditioned"):
            for r in range(3):
                jitter = 0.0 if tier == 0 else r - 1.0  # the 0 GiB runs repeat exactly
                better = 0.8 if admission == "conditioned" else 1.0
                cp = 1_000_000 - tier * 30_000 * (2 - better) + jitter * 1000
                write_run(
                    exp, {"host_tier_gib": tier, "admission": admission}, r,
                    summary={"makespan_s": 100.0 - tier * better + jitter, "calls": 8, "errors": 0,
                             "prompt_tokens": 1_000_000, "output_tokens": 800,
                             "ttft_p50_s": 0.2 + tier / 100 + jitter / 100, "ttft_p99_s": 0.5},
                    counters={"prompt_tokens": 1_000_000, "computed_prefill_tokens": cp,
                              "device_hit_tokens": 0, "host_restore_tokens": 1_000_000 - cp,
                              "host_write_tokens": tier * 1000 + jitter},
                )  # fmt: skip
    real = _section(write_report(exp, figures=False).report.read_text(), "What is real")
    tally = re.search(r"(\d+) real, (\d+) within noise", real)
    said = re.search(
        r"(\d+) comparisons were tested, .*\((\d+) more compare repeats with no spread", real
    )
    assert tally and said, real
    decided = int(tally[1]) + int(tally[2])
    tested, exact = int(said[1]), int(said[2])
    assert exact > 0 and tested + exact == decided


def test_engines_on_different_clocks_get_no_time_panel(tmp_path):
    # the simulator's virtual seconds beside a server's wall seconds: "What is real" refuses to
    # compare them, and Figure 7 drew them as bars on one axis
    exp = tmp_path / "eng"
    for engine, clock in (("sim", "virtual"), ("vllm", "wall")):
        for r in range(2):
            write_run(
                exp, {"engine": engine, "host_tier_gib": 5}, r, engine=engine,
                summary={"makespan_s": 10.0 + r, "ttft_p50_s": 0.1, "computed_prefill_tokens": 500 + r},
                provenance={"engine": engine, "clock": clock},
            )  # fmt: skip
    out = write_report(exp, figures=True)
    text = out.report.read_text()
    assert "Figure 7: engines at matched configuration (token counts only" in text
    svg = next(p for p in out.figures if p.name == "7_engines.svg").read_text()
    assert "computed prefill" in svg and "makespan" not in svg and "TTFT" not in svg


def test_no_figures_says_so(tmp_path):
    exp = tier_sweep(tmp_path / "tiny")
    text = write_report(exp, figures=False).report.read_text()
    figures = _section(text, "Figures")
    assert "None drawn: the report was written with `--no-figures`." in figures
