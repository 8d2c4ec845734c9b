"""Results directories never mix runs: `replay run --out` starts empty, one sweep per results
directory (a lock), typed placeholders, a full disk, resume of all-failed runs, file modes, and
the report of a partly run sweep. Real sweeps on the in-process simulator; the CLI in process."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pandas as pd
import pytest

from replay.analysis.load import load_results
from replay.cli.main import main
from replay.errors import ConfigError
from replay.report import build_report
from replay.sweep.config import load_experiment
from replay.sweep.results import exclusive_lock
from replay.sweep.runner import run_sweep
from replay.sweep.summary import write_summary
from replay.trace.io import write_trace
from replay.trace.synth import synth
from tests.servers import FaultServer

ROOT = Path(__file__).resolve().parents[1]

SIM_TEMPLATE = """
name = "d"
repeats = 2
seed = 3
[trace]
synth = { preset = "swe-agent", tasks = 3, seed = 1, max_calls_per_task = 4, max_prompt_tokens = 8000 }
[run]
pool = 2
[engine]
kind = "sim"
device_kv_gib = 0.5
[matrix]
host_tier_gib = [0, 2]
[predict]
enabled = false
"""


def sim_experiment(tmp_path: Path):
    path = tmp_path / "d.toml"
    path.write_text(SIM_TEMPLATE)
    return load_experiment(path)


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main(argv)
        sys.exit(0)
    out, err = capsys.readouterr()
    return int(e.value.code or 0), out, err


def read_run(path: Path) -> dict:
    return orjson.loads((path / "run.json").read_bytes())


# -- replay run --out -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("trace") / "t.jsonl.gz"
    write_trace(synth("claude-code", tasks=3, seed=2, scale=0.01, max_calls_per_task=3), path)
    return path


def test_run_refuses_a_used_out_dir_and_force_leaves_no_stale_counters(
    trace_file, tmp_path, capsys
):
    out = tmp_path / "run"
    base = ["run", "--trace", str(trace_file), "--pool", "2", "--out", str(out), "--json"]
    code, _, err = run_cli([*base, "--engine", "sim"], capsys)
    assert code == 0, err
    assert (out / "counters.json").exists()  # the simulator reports counters
    with FaultServer() as srv:
        http = [*base, "--url", srv.url, "--gap-scale", "0.001"]
        code, _, err = run_cli(http, capsys)
        assert code == 2 and err.count("\n") == 1
        assert "not empty" in err and "--force" in err and str(out) in err
        assert read_run(out)["provenance"]["engine"] == "sim"  # refused: nothing touched
        code, _, err = run_cli([*http, "--force"], capsys)
    assert code == 0, err
    # the HTTP server exposes no counters: none may be left from the simulator's run
    assert not (out / "counters.json").exists()
    assert read_run(out)["provenance"]["url"] == srv.url
    assert pd.isna(load_results(out).runs.iloc[0].get("device_hit_tokens"))


def test_force_never_clears_a_directory_that_is_not_a_run(trace_file, tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    argv = ["run", "--trace", str(trace_file), "--pool", "2", "--out", str(tmp_path)]
    code, _, err = run_cli([*argv, "--engine", "sim", "--force"], capsys)
    assert code == 2 and "notes.txt" in err and err.count("\n") == 1
    assert (tmp_path / "notes.txt").read_text() == "mine"


# -- one sweep per results directory ------------------------------------------------------------


def test_a_second_sweep_on_a_locked_results_dir_is_refused(tmp_path, capsys):
    exp = sim_experiment(tmp_path)
    results = tmp_path / "results"
    argv = ["sweep", exp.source, "--results", str(results)]
    with exclusive_lock(results / "d"):  # as a running sweep holds it
        code, _, err = run_cli(argv, capsys)
    assert code == 2 and err.count("\n") == 1
    assert "another sweep" in err and f"pid {os.getpid()}" in err
    assert not list((results / "d").glob("*/r*"))  # it ran nothing
    code, _, err = run_cli(argv, capsys)  # released: the sweep runs
    assert code == 0, err


def test_a_killed_sweep_leaves_no_stale_lock(tmp_path):
    exp = sim_experiment(tmp_path)
    exp_dir = tmp_path / "results" / "d"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path;"
            "from replay.sweep.results import exclusive_lock\n"
            "with exclusive_lock(Path(sys.argv[1])):\n print('held', flush=True); time.sleep(60)",
            str(exp_dir),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        holder.kill()  # SIGKILL: no cleanup runs
        holder.wait()
    finally:
        if holder.poll() is None:
            holder.kill()
    result = run_sweep(exp, results_root=tmp_path / "results", echo=lambda s: None)
    assert [o.status for o in result.outcomes] == ["ok"] * 4


# -- placeholders, a full disk ----------------------------------------------------------------


def test_summary_of_a_run_killed_inside_the_driver_keeps_typed_columns(tmp_path):
    exp = sim_experiment(tmp_path)
    result = run_sweep(exp, results_root=tmp_path / "results", echo=lambda s: None)
    killed = result.exp_dir / result.outcomes[-1].rel_dir
    # what the driver leaves when the process dies mid-replay: its own placeholder, which has
    # none of the sweep's keys (no repeat, no point)
    placeholder = {"status": "failed", "reason": "did not finish", "summary": None}
    (killed / "run.json").write_bytes(orjson.dumps(placeholder))
    df = write_summary(exp, result.exp_dir)
    assert pd.api.types.is_integer_dtype(df["repeat"])
    table = pd.read_parquet(result.exp_dir / "summary.parquet")
    assert sorted(table["repeat"]) == [0, 0, 1, 1]
    assert sorted(table["status"]) == ["failed", "ok", "ok", "ok"]


def test_a_column_with_mixed_types_is_written_as_text(tmp_path):
    exp = sim_experiment(tmp_path)
    result = run_sweep(exp, results_root=tmp_path / "results", echo=lambda s: None)
    odd = result.exp_dir / result.outcomes[0].rel_dir
    doc = read_run(odd)
    doc["summary"]["makespan_s"] = "n/a"  # an engine or an old writer with a string
    (odd / "run.json").write_bytes(orjson.dumps(doc))
    write_summary(exp, result.exp_dir)
    table = pd.read_parquet(result.exp_dir / "summary.parquet")
    assert "n/a" in set(table["makespan_s"]) and table["makespan_s"].notna().all()


def test_a_full_disk_gives_one_line_exit_1_and_keeps_the_results(tmp_path, capsys, monkeypatch):
    exp = sim_experiment(tmp_path)
    results = tmp_path / "results"
    argv = ["sweep", exp.source, "--results", str(results)]
    assert run_cli(argv, capsys)[0] == 0
    before = (results / "d" / "summary.parquet").read_bytes()
    runs_before = {p: p.read_bytes() for p in results.glob("d/*/r*/run.json")}

    def full(f, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("replay.sweep.results._write", full)
    code, _, err = run_cli(argv, capsys)  # resume: every run skipped, the summary write fails
    assert code == 1 and err.count("\n") == 1 and "disk full" in err, err
    assert "Traceback" not in err
    assert (results / "d" / "summary.parquet").read_bytes() == before
    assert {p: p.read_bytes() for p in results.glob("d/*/r*/run.json")} == runs_before
    assert not list(results.glob("d/**/*.tmp"))  # no half-written temporary left


# -- resume, file modes, the report of a partial sweep ------------------------------------------


def test_resume_reruns_a_run_whose_every_call_failed(tmp_path):
    exp = sim_experiment(tmp_path)
    result = run_sweep(exp, results_root=tmp_path / "results", echo=lambda s: None)
    bad = result.exp_dir / result.outcomes[0].rel_dir
    doc = read_run(bad)
    calls = doc["summary"]["calls"]
    # as a run against a server that refused every request ends: finished, all calls failed
    doc["status"] = "errors"
    doc["summary"]["errors"] = calls
    (bad / "run.json").write_bytes(orjson.dumps(doc))
    kept = run_sweep(exp, results_root=tmp_path / "results", echo=lambda s: None,
                     keep_all_failed=True)  # fmt: skip
    assert [o.status for o in kept.outcomes] == ["skipped"] * 4
    again = run_sweep(exp, results_root=tmp_path / "results", echo=lambda s: None)
    assert [o.status for o in again.outcomes] == ["ok", "skipped", "skipped", "skipped"]
    assert read_run(bad)["summary"]["errors"] == 0


def test_results_files_follow_the_umask(tmp_path):
    exp = sim_experiment(tmp_path)
    previous = os.umask(0o022)
    try:
        result = run_sweep(exp, results_root=tmp_path / "results", echo=lambda s: None)
    finally:
        os.umask(previous)
    run_dir = result.exp_dir / result.outcomes[0].rel_dir
    for path in (
        run_dir / "run.json",
        run_dir / "calls.parquet",
        run_dir / "counters.json",
        result.exp_dir / "summary.parquet",
        result.exp_dir / "plan.json",
    ):
        assert path.stat().st_mode & 0o777 == 0o644, path
    os.umask(0o077)
    try:
        result = run_sweep(exp, force=True, results_root=tmp_path / "r2", echo=lambda s: None)
    finally:
        os.umask(previous)
    assert (result.exp_dir / "summary.parquet").stat().st_mode & 0o777 == 0o600


def test_the_report_counts_planned_runs_that_never_started(tmp_path):
    exp = sim_experiment(tmp_path)
    result = run_sweep(exp, results_root=tmp_path / "results", echo=lambda s: None)
    # a sweep stopped before its last run: that directory was never made
    last = result.exp_dir / result.outcomes[-1].rel_dir
    for path in sorted(last.iterdir()):
        path.unlink()
    last.rmdir()
    loaded = load_results(result.exp_dir)
    assert loaded.not_started == [result.outcomes[-1].rel_dir] and len(loaded.planned) == 4
    text, _ = build_report(loaded, tmp_path / "report", figures=False)
    assert "1 of 4 planned runs never started" in text
    complete = run_sweep(exp, results_root=tmp_path / "results", echo=lambda s: None)
    assert [o.status for o in complete.outcomes].count("ok") == 1
    text, _ = build_report(load_results(result.exp_dir), tmp_path / "report", figures=False)
    assert "never started" not in text


def test_a_full_disk_during_a_run_stops_the_sweep_with_one_line(tmp_path, capsys, monkeypatch):
    exp = sim_experiment(tmp_path)
    results = tmp_path / "results"

    def full(rows, path):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("replay.driver.run.write_parquet", full)  # the driver's write seam
    code, out, err = run_cli(["sweep", exp.source, "--results", str(results)], capsys)
    assert code == 1 and err.count("\n") == 1 and "disk full" in err, err
    assert "Traceback" not in err
    assert "[1/" not in out  # stopped at the first run, not after each (only preparation lines)
    assert len(pd.read_parquet(results / "d" / "summary.parquet")) == 1


def test_a_sweep_says_what_it_prepares_before_its_first_run(tmp_path, capsys):
    """Synthesis and predictions ran silently for seconds (14 s on paper-kappa) before the first
    run's line; each now has a line first, and a rerun that predicts nothing says nothing of it."""
    path = tmp_path / "d.toml"
    path.write_text(
        SIM_TEMPLATE.replace(
            "enabled = false", 'model = "qwen3-coder-30b-a3b"\ndevice_kv_gib = 0.5'
        )
    )
    results = tmp_path / "results"
    code, out, err = run_cli(["sweep", str(path), "--results", str(results)], capsys)
    assert (results / "d" / "predictions.json").is_file(), err
    lines = out.splitlines()
    assert code == 0 and lines[:2] == [
        "d: synthesizing the trace ...",
        "d: predicting (predictions.json) ...",
    ]
    assert lines[2].startswith("[1/")
    code, out, _ = run_cli(["sweep", str(path), "--results", str(results)], capsys)
    assert code == 0 and "predicting" not in out  # predictions.json is written once


def test_force_with_a_changed_experiment_sets_the_old_runs_aside(tmp_path):
    """--force with fewer points and repeats: every earlier run is moved to replaced-<time>/
    (nothing deleted), so the summary and the report hold this experiment's runs only. Before,
    they mixed 6 runs into a 2-run plan."""
    from replay.analysis.load import load_results
    from replay.sweep.runner import run_sweep

    results = tmp_path / "results"
    path = tmp_path / "d.toml"
    path.write_text(SIM_TEMPLATE)  # 2 repeats x tiers 0, 2
    run_sweep(load_experiment(path), results_root=results, echo=lambda s: None)
    path.write_text(SIM_TEMPLATE.replace("repeats = 2", "repeats = 1").replace("[0, 2]", "[0]"))
    said: list[str] = []
    run_sweep(load_experiment(path), results_root=results, force=True, echo=said.append)
    exp_dir = results / "d"
    assert len(pd.read_parquet(exp_dir / "summary.parquet")) == 1
    assert len(load_results(exp_dir).runs) == 1
    (aside,) = exp_dir.glob("replaced-*")
    moved = sorted(str(p.parent.relative_to(aside)) for p in aside.glob("*/*/run.json"))
    assert moved == [
        "host_tier_gib=0/r0",
        "host_tier_gib=0/r1",
        "host_tier_gib=2/r0",
        "host_tier_gib=2/r1",
    ]
    assert not (exp_dir / "host_tier_gib=2").exists()
    assert any("moved 4 earlier run directories" in s for s in said)
    # the files that describe the old runs went with them: the report reads them as they were
    # (the old experiment file was overwritten, and the moved runs reported against the new one)
    assert (aside / "experiment.toml").read_text() == SIM_TEMPLATE
    assert len(pd.read_parquet(aside / "summary.parquet")) == 4
    assert orjson.loads((aside / "plan.json").read_bytes())["runs"] == moved
    assert (exp_dir / "experiment.toml").read_text() != SIM_TEMPLATE
    assert len(load_results(aside).runs) == 4


def test_an_interrupted_force_resumes_with_none_of_the_old_files_runs(tmp_path):
    """--force of a changed engine option, stopped after its first run, then a plain resume:
    the old file's runs at the same points were skipped as finished, so the folder held runs of
    two device sizes under one experiment file."""
    from replay.sweep.runner import SweepRunner, run_in_order, run_sweep

    results = tmp_path / "results"
    path = tmp_path / "d.toml"
    path.write_text(SIM_TEMPLATE)
    run_sweep(load_experiment(path), results_root=results, echo=lambda s: None)
    path.write_text(SIM_TEMPLATE.replace("device_kv_gib = 0.5", "device_kv_gib = 0.25"))

    def first_then_stop(runner, planned, outcomes):
        run_in_order(runner, planned[:1], outcomes)
        return True  # interrupted

    exp = load_experiment(path)
    runner = SweepRunner(exp, results_root=results, force=True, echo=lambda s: None)
    assert runner.run(first_then_stop).interrupted
    run_sweep(load_experiment(path), results_root=results, echo=lambda s: None)
    sizes = {
        str(d.relative_to(results / "d")): orjson.loads((d / "run.json").read_bytes())[
            "provenance"
        ]["sim_config"]["device_kv_gib"]
        for d in (results / "d").glob("host_tier_gib=*/r*")
    }
    assert len(sizes) == 4 and set(sizes.values()) == {0.25}, sizes


def test_a_trace_file_changed_in_place_is_refused_on_resume(tmp_path):
    """The experiment file unchanged, its trace file rewritten: a resume mixed the runs of two
    workloads, and the report called the difference an effect of the host tier."""
    from replay.sweep.runner import run_sweep
    from replay.trace.io import write_trace
    from replay.trace.synth import synth

    trace = tmp_path / "t.jsonl.gz"
    write_trace(synth("swe-agent", tasks=2, seed=1, max_calls_per_task=3, scale=0.05), trace)
    text = SIM_TEMPLATE.replace(
        'synth = { preset = "swe-agent", tasks = 3, seed = 1, max_calls_per_task = 4, '
        "max_prompt_tokens = 8000 }",
        f'path = "{trace}"',
    ).replace("repeats = 2", "repeats = 1")
    path = tmp_path / "d.toml"
    path.write_text(text)
    results = tmp_path / "results"
    run_sweep(load_experiment(path), results_root=results, echo=lambda s: None)
    write_trace(synth("swe-agent", tasks=3, seed=2, max_calls_per_task=3, scale=0.05), trace)
    with pytest.raises(ConfigError, match="trace.path: the trace file changed since the runs"):
        run_sweep(load_experiment(path), results_root=results, echo=lambda s: None)
    # --force starts over with the new trace
    run_sweep(load_experiment(path), results_root=results, force=True, echo=lambda s: None)


def test_a_sweep_whose_every_call_failed_exits_1(tmp_path, capsys):
    """Every run `errors` with all of its calls failed: it measured nothing, and exited 0."""
    path = tmp_path / "d.toml"
    # a device too small for any call: each is refused (http_4xx), every run ends `errors`
    path.write_text(SIM_TEMPLATE.replace("device_kv_gib = 0.5", "device_kv_gib = 0.001"))
    code, out, err = run_cli(["sweep", str(path), "--results", str(tmp_path / "r")], capsys)
    assert "errors" in out and code == 1, (out, err)


def test_a_failure_that_quotes_the_log_is_one_line_and_an_interrupt_outside_a_replay_is_said():
    """A reason with the server log's tail spilled 4-5 lines into the progress; an interrupt
    during a launch, a health wait or a stop left no `[i/n] ...: interrupted` line and a final
    line reading `name: ; summary: ...`."""
    from types import SimpleNamespace

    from replay.sweep.runner import RunOutcome, outcome_line, run_in_order

    line = outcome_line(
        1, 2, RunOutcome("p/r0", "failed", "server exited (code 2):\nusage: x\nerr")
    )
    assert line == (
        "[1/2] p/r0: failed (server exited (code 2); the server log's tail is in run.json)"
    )
    said: list[str] = []

    def run_one(p):
        raise KeyboardInterrupt

    runner = SimpleNamespace(run_one=run_one, echo=said.append)
    planned = [SimpleNamespace(rel_dir="p/r0"), SimpleNamespace(rel_dir="p/r1")]
    outcomes: list = []
    with pytest.raises(KeyboardInterrupt):
        run_in_order(runner, planned, outcomes)  # type: ignore[arg-type]
    assert [o.status for o in outcomes] == ["interrupted"]
    assert said == ["[1/2] p/r0: interrupted"]


def test_a_sweep_whose_output_nobody_reads_runs_to_its_end(tmp_path):
    """`replay sweep ... | head -1`: the closed pipe ended the sweep after one more run, exit 1,
    with nothing said. Its runs all finish now, and it exits 0."""
    import subprocess

    path = tmp_path / "d.toml"
    path.write_text(SIM_TEMPLATE)
    proc = subprocess.Popen(
        [sys.executable, "-m", "replay.cli.main", "sweep", str(path), "--results",
         str(tmp_path / "results")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()  # as `head -1` does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err
    assert len(pd.read_parquet(tmp_path / "results" / "d" / "summary.parquet")) == 4


def test_run_force_clears_the_report_a_user_wrote_into_its_directory(tmp_path, capsys):
    """run, then `replay report` on the run directory, then run --force again: refused, since
    report.md was not on the list of the project's own files."""
    trace = tmp_path / "t.jsonl.gz"
    write_trace(synth("swe-agent", tasks=2, seed=1, max_calls_per_task=2, scale=0.05), trace)
    argv = ["run", "--trace", str(trace), "--pool", "2", "--out", str(tmp_path / "r")]
    argv += ["--engine", "sim", "--json"]
    assert run_cli(argv, capsys)[0] == 0
    assert run_cli(["report", str(tmp_path / "r"), "--no-figures"], capsys)[0] == 0
    assert (tmp_path / "r" / "report.md").is_file()
    code, _, err = run_cli([*argv, "--force"], capsys)
    assert code == 0, err
    assert not (tmp_path / "r" / "report.md").exists()
    (tmp_path / "r" / "notes.txt").write_text("mine")  # a user's own file is still refused
    code, _, err = run_cli([*argv, "--force"], capsys)
    assert code == 2 and "holds files a run does not write (notes.txt)" in err


def test_a_costs_file_changed_in_place_is_refused_on_resume(tmp_path):
    """The experiment file unchanged, its calibrated costs edited: a resume ran the missing
    runs with the new costs beside the old ones (makespan 46 s against 4 s in the audit), and
    the runs recorded only the file's path."""
    from replay.sweep.runner import run_sweep

    costs = tmp_path / "costs.toml"
    original = (ROOT / "experiments/costs/llamacpp-cpu.toml").read_text()
    costs.write_text(original)
    path = tmp_path / "d.toml"
    text = SIM_TEMPLATE.replace("repeats = 2", "repeats = 1")
    path.write_text(text.replace('kind = "sim"', f'kind = "sim"\ncosts = "{costs}"'))
    results = tmp_path / "results"
    first = run_sweep(load_experiment(path), results_root=results, echo=lambda s: None)
    shutil.rmtree(first.exp_dir / "host_tier_gib=2")  # a run still to do
    costs.write_text(
        original.replace("prefill_s_per_token = 2.5852", "prefill_s_per_token = 9.5852")
    )
    with pytest.raises(ConfigError, match="engine.costs: the costs file .* changed since the runs"):
        run_sweep(load_experiment(path), results_root=results, echo=lambda s: None)
    assert not (first.exp_dir / "host_tier_gib=2").exists()  # nothing ran
    costs.write_text(original)  # restored: the resume goes on
    again = run_sweep(load_experiment(path), results_root=results, echo=lambda s: None)
    assert sorted(o.status for o in again.outcomes) == ["ok", "skipped"]


def test_a_signal_while_a_finished_run_is_written_keeps_its_status(tmp_path, monkeypatch):
    """Ctrl-C while the driver wrote a finished in-process run's results (here: as the engine's
    counters are read): the driver raises it once run.json is complete, and the sweep stops. It
    then marked the run `interrupted` over the `ok` the driver had recorded."""
    import signal

    from replay.sim.transport import SimTransport

    real = SimTransport.counters

    def counters_then_ctrl_c(self):
        os.kill(os.getpid(), signal.SIGINT)  # arrives outside the replay's loop: held, re-raised
        return real(self)

    monkeypatch.setattr(SimTransport, "counters", counters_then_ctrl_c)
    path = tmp_path / "d.toml"
    path.write_text(SIM_TEMPLATE.replace("repeats = 2", "repeats = 1").replace("[0, 2]", "[0]"))
    result = run_sweep(
        load_experiment(path), results_root=tmp_path / "results", echo=lambda s: None
    )
    assert result.interrupted
    doc = orjson.loads((result.exp_dir / "host_tier_gib=0/r0/run.json").read_bytes())
    assert doc["status"] == "ok" and doc["summary"]["calls"] > 0, doc.get("reason")
    assert doc["experiment"] == "d" and doc["point_name"] == "host_tier_gib=0"
