"""The EfficientAgent study's makespan beside ours: from the run's start (before the first call's
gap) to the end of the last task's tail gap, as the release's client measures it; in the run
summary, the sweep summary and the report, and absent (no column) for runs written before it."""

from __future__ import annotations

import datetime as dt

import orjson
import pandas as pd
import pytest

from replay.driver.options import RunOptions
from replay.driver.records import study_makespan_s, summarize
from replay.driver.run import run_replay
from replay.report import write_report
from replay.sim.options import SimConfig
from replay.sim.transport import SimTransport
from tests.report_results_builder import write_run
from tests.servers import make_trace


def _row(task: str, t_send: float, t_end: float) -> dict:
    return {"task": task, "t_send": t_send, "t_end": t_end}


def test_last_end_plus_tail_gap_over_tasks_from_time_zero():
    rows = [_row("a", 2.0, 3.0), _row("a", 4.0, 6.0), _row("b", 6.5, 7.0)]
    # a ends at 6 + tail 4 = 10; b at 7 + tail 1 = 8: the study's run ends at 10
    assert study_makespan_s(rows, {"a": 4.0, "b": 1.0}) == 10.0
    assert study_makespan_s(rows, {}) == 7.0  # no tail gaps: the last end, counted from 0
    assert study_makespan_s([], {"a": 1.0}) == 0.0
    s = summarize([{**r, "status": "ok", "prompt_tokens": 1, "max_tokens": 1, "drift_s": 0.0}
                   for r in rows], tail_gaps_s={"a": 4.0})  # fmt: skip
    assert s["makespan_s"] == 5.0 and s["study_makespan_s"] == 10.0
    assert "study_makespan_s" not in summarize([])  # without tail gaps: not computed


@pytest.mark.parametrize("gap_scale", [1.0, 0.5])
def test_simulated_run_adds_the_first_gap_and_the_last_tail_gap(tmp_path, gap_scale):
    """One slot, two tasks: the study's clock also counts task a's first gap (2 s) and task b's
    tail gap (5 s), both scaled; the tail gap between the tasks is inside both definitions."""
    trace = make_trace(
        {
            "a": [{"gap": 2.0, "new": 64}, {"gap": 1.0, "new": 16, "tail": 3.0}],
            "b": [{"gap": 0.0, "new": 64}, {"gap": 1.0, "new": 16, "tail": 5.0}],
        }
    )
    cfg = SimConfig.from_options(device_kv_gib=0.5)
    s = run_replay(
        trace,
        lambda: SimTransport(cfg, vocab_size=trace.header.vocab_size),
        RunOptions(pool=1, gap_scale=gap_scale),
        tmp_path,
        virtual=True,
    )
    assert s["study_makespan_s"] == pytest.approx(s["makespan_s"] + (2.0 + 5.0) * gap_scale)
    doc = orjson.loads((tmp_path / "run.json").read_bytes())
    assert doc["summary"]["study_makespan_s"] == s["study_makespan_s"]


def test_report_shows_the_study_makespan_beside_ours_only_when_runs_have_it(tmp_path):
    new, old = tmp_path / "new", tmp_path / "old"
    for tier, (ours, study) in ((0, (100.0, 112.0)), (5, (90.0, 101.0))):
        for r in range(2):
            point = {"host_tier_gib": tier}
            write_run(
                new, point, r, summary={"makespan_s": ours + r, "study_makespan_s": study + r}
            )
            write_run(old, point, r, summary={"makespan_s": ours + r})
    text = write_report(new, figures=False, today=lambda: dt.date(2030, 1, 1)).report.read_text()
    header = next(line for line in text.splitlines() if "| makespan (s) |" in line)
    assert "| makespan (s) | study makespan (s) |" in header
    assert "112.5 ± " in text and "101.5 ± " in text  # means of the two repeats
    assert "end of the last task's tail gap" in text
    text = write_report(old, figures=False, today=lambda: dt.date(2030, 1, 1)).report.read_text()
    assert "study makespan" not in text


def test_sweep_summary_has_the_column(tmp_path):
    from replay.sweep.config import load_experiment
    from replay.sweep.runner import run_sweep

    exp_file = tmp_path / "e.toml"
    exp_file.write_text(
        'name = "e"\nrepeats = 1\n[trace]\nsynth = { preset = "swe-agent", tasks = 2, seed = 1, '
        "max_calls_per_task = 3, max_prompt_tokens = 4000 }\n[run]\npool = 1\n"
        '[engine]\nkind = "sim"\ndevice_kv_gib = 0.5\n'
    )
    exp = load_experiment(exp_file)
    result = run_sweep(exp, results_root=tmp_path / "results", echo=lambda line: None)
    summary = pd.read_parquet(result.exp_dir / "summary.parquet")
    assert (summary["study_makespan_s"] > summary["makespan_s"]).all()


def test_run_command_prints_both_makespans(tmp_path, capsys):
    from replay.cli.main import main
    from replay.trace.io import write_trace

    trace = make_trace({"a": [{"gap": 2.0}, {"gap": 1.0, "tail": 3.0}]})
    write_trace(trace, tmp_path / "t.jsonl.gz")
    argv = ["run", "--trace", str(tmp_path / "t.jsonl.gz"), "--pool", "1"]
    try:
        main([*argv, "--out", str(tmp_path / "o"), "--engine", "sim", "--quiet"])
    except SystemExit as e:
        assert e.code in (0, None)
    out = capsys.readouterr().out
    s = orjson.loads((tmp_path / "o" / "run.json").read_bytes())["summary"]
    assert f"makespan     {s['makespan_s']:.2f} s" in out
    assert f"study def  {s['study_makespan_s']:.2f} s (first gap to last tail gap)" in out
    assert s["study_makespan_s"] == pytest.approx(s["makespan_s"] + 5.0)


def test_a_task_a_stop_cut_short_adds_no_tail_gap(tmp_path):
    """Task a's third call never ran (its task was aborted at its second's failure): its tail gap
    (20 s), which follows its last call, was added to its second call's end all the same."""
    from replay.errors import ErrorKind
    from tests.servers import ScriptedTransport

    trace = make_trace(
        {
            "a": [{"new": 8}, {"gap": 1.0, "new": 8}, {"gap": 1.0, "new": 8, "tail": 20.0}],
            "b": [{"new": 8, "tail": 2.0}],
        }
    )
    s = run_replay(
        trace,
        lambda: ScriptedTransport(fail={("a", 1): ErrorKind.HTTP_5XX}),
        RunOptions(pool=2, on_error="abort-task"),
        tmp_path,
        virtual=True,
    )
    rows = pd.read_parquet(tmp_path / "calls.parquet")
    assert sorted(zip(rows["task"], rows["call"], strict=True)) == [("a", 0), ("a", 1), ("b", 0)]
    b_end = float(rows.loc[rows["task"] == "b", "t_end"].iloc[0])
    a_end = float(rows.loc[rows["task"] == "a", "t_end"].max())
    assert s["study_makespan_s"] == pytest.approx(max(a_end, b_end + 2.0))


def test_a_crash_keeps_the_finished_calls_in_the_parquet_too(tmp_path):
    """calls.parquet was written empty after a crash while calls.jsonl held every finished
    call; docs/results.md promises the same rows in both, also after a failure."""

    class ClosesBadly(SimTransport):
        async def close(self) -> None:
            await super().close()
            raise RuntimeError("close failed")

    trace = make_trace({t: [{"new": 16}, {"gap": 1.0, "new": 16}] for t in ("a", "b")})
    cfg = SimConfig.from_options(device_kv_gib=0.5)
    with pytest.raises(RuntimeError, match="close failed"):
        run_replay(trace, lambda: ClosesBadly(cfg, vocab_size=trace.header.vocab_size),
                   RunOptions(pool=2), tmp_path, virtual=True)  # fmt: skip
    doc = orjson.loads((tmp_path / "run.json").read_bytes())
    assert doc["status"] == "failed" and "crashed" in doc["reason"]
    jsonl = (tmp_path / "calls.jsonl").read_text().splitlines()
    assert len(jsonl) == 4 and len(pd.read_parquet(tmp_path / "calls.parquet")) == 4
