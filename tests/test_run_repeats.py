"""`replay run --repeats N` is a one-point sweep; `replay compare A B` sets two points side by side."""

from __future__ import annotations

import math

import orjson
import pandas as pd

from replay.analysis.compare import welch_compare
from tests.test_driver_cli import _replay, trace_file  # noqa: F401 - fixture


def _repeated(trace, out, *extra: str):
    return _replay(
        "run", "--trace", str(trace), "--pool", "2", "--out", str(out), "--engine", "sim",
        "--jitter", "0.05", *extra, timeout=300,
    )  # fmt: skip


def test_repeats_run_through_the_sweep_and_give_intervals(trace_file, tmp_path):  # noqa: F811
    out = tmp_path / "rep"
    cp = _repeated(trace_file, out, "--repeats", "3")
    assert cp.returncode == 0, cp.stderr
    # the sweep's layout, summary table and report
    assert sorted(p.name for p in (out / "default").iterdir()) == ["r0", "r1", "r2"]
    table = pd.read_parquet(out / "summary.parquet")
    assert list(table["repeat"]) == [0, 1, 2] and set(table["status"]) == {"ok"}
    assert (out / "report.md").is_file() and (out / "experiment.toml").is_file()
    prov = orjson.loads((out / "default" / "r1" / "run.json").read_bytes())["provenance"]
    assert prov["engine_version"].startswith("replay-sim ") and len(prov["trace_sha256"]) == 64
    # jitter with its own seed per repeat: the repeats differ, so the interval is a real one
    line = next(x for x in cp.stdout.splitlines() if x.startswith("makespan_s"))
    mean, low, high, n = (float(v) for v in line.replace("[", " ").replace("]", " ").replace(",", " ").split()[1:])  # fmt: skip
    assert n == 3 and low <= mean <= high and low < high
    assert table["makespan_s"].std() > 0
    assert math.isclose(mean, table["makespan_s"].mean(), rel_tol=1e-5)
    # rerun: the sweep resumes (nothing runs again)
    cp = _repeated(trace_file, out, "--repeats", "3")
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.count("skipped") == 3


def test_compare_two_results_gives_welch_verdicts(trace_file, tmp_path):  # noqa: F811
    a, b = tmp_path / "a", tmp_path / "b"
    assert _repeated(trace_file, a, "--repeats", "2").returncode == 0
    cp = _repeated(
        trace_file, b, "--repeats", "2", "--host-tier-gib", "4", "--device-kv-gib", "0.05"
    )
    assert cp.returncode == 0, cp.stderr
    cp = _replay("compare", str(a), str(b / "default"), "--csv", str(tmp_path / "c.csv"))
    assert cp.returncode == 0, cp.stderr
    table = pd.read_csv(tmp_path / "c.csv").set_index("metric")
    ta = pd.read_parquet(a / "summary.parquet")
    tb = pd.read_parquet(b / "summary.parquet")
    for metric in ("makespan_s", "host_write_tokens", "itl_p50_s", "latency_p99_s"):
        want = welch_compare(ta[metric], tb[metric])
        assert table.loc[metric, "verdict"] == want.verdict
        assert math.isclose(table.loc[metric, "diff"], want.diff, rel_tol=1e-9, abs_tol=1e-12)
        assert metric in cp.stdout
    assert table.loc["host_write_tokens", "verdict"] == "real"  # a host tier only on B
    assert "different traces" not in cp.stderr  # one trace: no note


def test_compare_notes_sides_that_replayed_different_traces(trace_file, tmp_path):  # noqa: F811
    from replay.trace.io import write_trace
    from replay.trace.synth import synth

    other = tmp_path / "other.jsonl.gz"
    write_trace(synth("claude-code", tasks=4, seed=3, scale=0.01, max_calls_per_task=5), other)
    a, b = tmp_path / "a", tmp_path / "b"
    assert _repeated(trace_file, a).returncode == 0
    assert _repeated(other, b).returncode == 0
    cp = _replay("compare", str(a), str(b))
    assert cp.returncode == 0, cp.stderr
    assert "note: A and B replayed different traces" in cp.stderr


def test_compare_asks_for_a_point_when_a_sweep_has_several(tmp_path):
    for name, tier in (("p0", 0), ("p1", 2)):
        d = tmp_path / "exp" / f"host_tier_gib={tier}" / "r0"
        d.mkdir(parents=True)
        summary = {"makespan_s": 1.0 + tier, "calls": 3}
        (d / "run.json").write_bytes(orjson.dumps({"status": "ok", "summary": summary}))
        del name
    cp = _replay("compare", str(tmp_path / "exp"), str(tmp_path / "exp"))
    assert cp.returncode == 2 and "name one as" in cp.stderr and "Traceback" not in cp.stderr
    cp = _replay(
        "compare",
        str(tmp_path / "exp" / "host_tier_gib=0"),
        str(tmp_path / "exp" / "host_tier_gib=2"),
    )
    assert cp.returncode == 0, cp.stderr
    assert "single repeat" in cp.stdout


def test_compare_says_what_it_left_out_and_why_a_side_is_empty(tmp_path):
    runs = {"host_tier_gib=0": [1.0, "fast"], "host_tier_gib=2": [2.0, 2.5]}
    for point, makespans in runs.items():
        for i, makespan in enumerate(makespans):
            d = tmp_path / "exp" / point / f"r{i}"
            d.mkdir(parents=True)
            summary = {"makespan_s": makespan, "calls": 3}
            (d / "run.json").write_bytes(orjson.dumps({"status": "ok", "summary": summary}))
    a, b = tmp_path / "exp" / "host_tier_gib=0", tmp_path / "exp" / "host_tier_gib=2"
    cp = _replay("compare", str(a), str(b))
    assert cp.returncode == 0, cp.stderr
    assert "host_tier_gib=0/r1/run.json: summary.makespan_s: not a number ('fast')" in cp.stderr
    assert "makespan_s" in cp.stdout and "host_tier_gib" not in cp.stdout.split("\n", 2)[2]
    # a side whose only run.json is unreadable says so
    (b / "r0" / "run.json").write_text("{torn")
    (b / "r1" / "run.json").write_text("{torn")
    cp = _replay("compare", str(a), str(b))
    assert cp.returncode == 2 and "no finished runs" in cp.stderr
    assert "host_tier_gib=2/r0/run.json: unreadable" in cp.stderr
    # a CSV path that cannot be written fails before any table, naming the option
    cp = _replay("compare", str(a), str(a), "--csv", str(tmp_path / "no" / "dir" / "c.csv"))
    assert cp.returncode == 2 and "compare: --csv: cannot write" in cp.stderr
    assert cp.stdout == ""


def test_intervals_leave_out_repeats_that_ended_with_errors(tmp_path):
    """As the report does: an `errors` repeat is not in the mean, and the output says so."""
    from replay.cli.run_repeats import interval_lines

    table = pd.DataFrame(
        {"status": ["ok", "errors", "ok"], "makespan_s": [10.0, 500.0, 12.0], "repeat": [0, 1, 2]}
    )
    table.to_parquet(tmp_path / "summary.parquet")
    lines = interval_lines(tmp_path, ("makespan_s",))
    (row,) = [x for x in lines if x.startswith("makespan_s")]
    assert row.split()[1] == "11" and row.split()[-1] == "2"
    assert lines[-1] == "1 of 3 repeats did not end ok and are left out (report.md)"
    table.assign(status="errors").to_parquet(tmp_path / "summary.parquet")
    assert interval_lines(tmp_path, ("makespan_s",)) == [
        "no repeat ended ok: no intervals (3 of 3 repeats did not end ok and are left out "
        "(report.md))"
    ]


def test_repeats_refuse_a_single_runs_folder_and_a_refused_line_leaves_nothing(
    trace_file,  # noqa: F811
    tmp_path,
):
    """--repeats wrote beside a single run (compare then read the old run instead of the
    repeats); a refused trace or option kept its experiment file, and the corrected command was
    then refused as another command line."""
    single = tmp_path / "single"
    assert _replay("run", "--trace", str(trace_file), "--pool", "2", "--out", str(single),
                   "--engine", "sim").returncode == 0  # fmt: skip
    cp = _repeated(trace_file, single, "--repeats", "2")
    assert cp.returncode == 2 and "holds a single run" in cp.stderr
    out = tmp_path / "rep"
    bad = _repeated(tmp_path / "nosuch.jsonl", out, "--repeats", "2")
    assert bad.returncode == 2 and "no such trace file" in bad.stderr and not out.exists()
    bad = _repeated(trace_file, out, "--repeats", "2", "--host-tier-gib", "-5")
    assert bad.returncode == 2 and "rep/experiment.toml" in bad.stderr and not out.exists()
    assert _repeated(trace_file, out, "--repeats", "2").returncode == 0
    as_json = _repeated(trace_file, tmp_path / "j", "--repeats", "2", "--json")
    assert as_json.returncode == 2 and "--json: not with --repeats" in as_json.stderr


def test_repeats_refused_by_a_running_sweep_leave_its_experiment_file(trace_file, tmp_path):  # noqa: F811
    """A `--repeats --force` refused because a sweep holds the folder rewrote that sweep's
    experiment.toml first: its runs lost the record of what they ran."""
    from replay.sweep.results import exclusive_lock

    out = tmp_path / "busy"
    out.mkdir()
    (out / "experiment.toml").write_text('name = "busy"\n# the running sweep\'s file\n')
    with exclusive_lock(out):  # the running sweep
        cp = _repeated(trace_file, out, "--repeats", "2", "--force")
    assert cp.returncode == 2 and "another sweep" in cp.stderr
    assert (out / "experiment.toml").read_text().endswith("the running sweep's file\n")


def test_a_fixed_tier_is_compared_with_its_prediction(trace_file, tmp_path):  # noqa: F811
    # the tier is an engine option, not a matrix key: the report used to find no prediction to
    # compare with, though predictions.json held one for that very tier
    out = tmp_path / "fixed"
    cp = _repeated(
        trace_file, out, "--repeats", "2", "--host-tier-gib", "4", "--device-kv-gib", "0.05"
    )
    assert cp.returncode == 0, cp.stderr
    text = (out / "report.md").read_text()
    section = text.split("## Prediction vs measurement", 1)[1].split("\n## ", 1)[0]
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| 4 |")]
    measured = {r[1]: r[3] for r in rows}
    assert "host_restore_tokens" in measured and "computed_prefill_tokens" in measured, section
    table = pd.read_parquet(out / "summary.parquet")
    mean = table["computed_prefill_tokens"].mean()
    shown = measured["computed_prefill_tokens"].split(" [")[0]
    scale = {"K": 1e3, "M": 1e6}.get(shown[-1], 1.0)
    assert math.isclose(float(shown.rstrip("KM")) * scale, mean, rel_tol=5e-3)


def test_a_csv_inside_a_compared_side_is_refused(trace_file, tmp_path):  # noqa: F811
    # `compare --csv A/r0/run.json` replaced the run it compared with the table
    a = tmp_path / "a"
    assert _repeated(trace_file, a, "--repeats", "2").returncode == 0
    run_json = a / "default" / "r0" / "run.json"
    before = run_json.read_bytes()
    for target in (run_json, a / "summary.csv", a / "default" / "new.csv"):
        cp = _replay("compare", str(a), str(a), "--csv", str(target))
        assert cp.returncode == 2 and "which this command reads" in cp.stderr, cp.stderr
    assert run_json.read_bytes() == before
    cp = _replay("compare", str(a), str(a), "--csv", str(tmp_path / "c.csv"))
    assert cp.returncode == 0 and (tmp_path / "c.csv").read_text().startswith("metric")
