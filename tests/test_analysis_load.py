"""Loading results directories laid out as docs/results.md says, including broken and partial runs."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from replay.analysis.load import load_calls, load_results, parse_point_name
from replay.errors import ConfigError, ReplayError
from tests.report_results_builder import make_calls, tier_sweep, write_run


def test_point_names_parse_to_typed_values():
    assert parse_point_name("host_tier_gib=5,admission=all") == {
        "host_tier_gib": 5,
        "admission": "all",
    }
    assert parse_point_name("kappa=2.5,debug=true") == {"kappa": 2.5, "debug": True}


def test_sweep_loads_one_row_per_run(tmp_path):
    res = load_results(tier_sweep(tmp_path / "tiny"))
    assert res.experiment == "tiny"
    assert res.params == ("host_tier_gib", "admission")
    assert len(res.runs) == 15
    assert res.runs["status"].value_counts().to_dict() == {"ok": 14, "failed": 1}
    failed = res.runs[res.runs.status == "failed"].iloc[0]
    assert (failed["host_tier_gib"], failed["admission"], failed["repeat"]) == (20, "all", "r2")
    assert "server gone" in failed["error"]
    assert pd.isna(failed["makespan_s"])  # no summary, no invented number
    ok = res.runs[(res.runs.host_tier_gib == 5) & (res.runs.admission == "conditioned")]
    assert sorted(ok["makespan_s"]) == [79.5, 80.0, 80.5]
    # Counters come from counters.json, extras included.
    assert set(ok["chunks_written"]) == {40}
    assert res.experiment_toml.startswith('name = "tiny"')
    assert res.predictions["tier_key"] == "host_tier_gib"
    assert set(res.runs["trace_sha256"]) == {"ab" * 32}
    assert set(res.runs["git_revision"]) == {"deadbeef"}


def test_counters_json_null_means_unknown_not_zero(tmp_path):
    write_run(
        tmp_path / "e",
        {"host_tier_gib": 5},
        0,
        summary={"makespan_s": 1.0},
        counters={"host_restore_tokens": None, "host_write_tokens": 7},
    )
    runs = load_results(tmp_path / "e").runs
    assert pd.isna(runs["host_restore_tokens"].iloc[0])
    assert runs["host_write_tokens"].iloc[0] == 7


def test_partial_and_unreadable_runs_still_give_rows(tmp_path):
    exp = tmp_path / "e"
    write_run(exp, {"host_tier_gib": 5}, 0, summary={"makespan_s": 1.0})
    stopped = exp / "host_tier_gib=10" / "r0"
    stopped.mkdir(parents=True)
    (stopped / "calls.jsonl").write_text(json.dumps({"slot": 0, "t_send": 0.0}) + "\n")
    broken = exp / "host_tier_gib=20" / "r0"
    broken.mkdir(parents=True)
    (broken / "run.json").write_text("{not json")
    res = load_results(exp)
    status = dict(zip(res.runs["point"], res.runs["status"], strict=True))
    assert status == {
        "host_tier_gib=5": "ok",
        "host_tier_gib=10": "incomplete",
        "host_tier_gib=20": "unreadable",
    }
    assert (
        res.runs.set_index("point").loc["host_tier_gib=10", "host_tier_gib"] == 10
    )  # from the dir name
    assert any("run.json: unreadable" in n for n in res.notes)
    # the report's "why" column says what is wrong with it
    assert "run.json: unreadable" in res.runs.set_index("point").loc["host_tier_gib=20", "error"]


def test_a_number_that_is_not_a_number_is_left_out_with_a_note(tmp_path):
    exp = tmp_path / "e"
    write_run(exp, {"host_tier_gib": 0}, 0, summary={"makespan_s": "fast", "drift_cause": "io"})
    write_run(exp, {"host_tier_gib": 0}, 1, summary={"makespan_s": 2.0, "drift_cause": None})
    res = load_results(exp)
    assert list(res.runs["makespan_s"].isna()) == [True, False]
    assert res.runs["makespan_s"].mean() == 2.0  # the report's aggregation no longer fails
    assert res.runs["drift_cause"].iloc[0] == "io"  # words where words belong
    assert res.notes == (
        "host_tier_gib=0/r0/run.json: summary.makespan_s: not a number ('fast'); left out",
    )


def test_a_run_copied_from_elsewhere_is_left_out_with_a_note(tmp_path):
    """A run of another experiment, point, repeat or trace under this sweep's folders used to be
    pooled into the point's mean and interval without a word."""
    exp = tmp_path / "e"
    sha = "ab" * 32
    for r in range(2):
        write_run(exp, {"host_tier_gib": 5}, r, summary={"makespan_s": 10.0},
                  provenance={"trace_sha256": sha})  # fmt: skip
    write_run(exp, {"host_tier_gib": 10}, 0, summary={"makespan_s": 9.0},
              provenance={"trace_sha256": sha})  # fmt: skip
    plan = {"experiment": "e", "runs": ["host_tier_gib=5/r0", "host_tier_gib=5/r1",
            "host_tier_gib=10/r0", "host_tier_gib=10/r1"], "trace_sha256": sha}  # fmt: skip
    (exp / "plan.json").write_text(json.dumps(plan))
    # another sweep's run copied in as a repeat this plan does not have
    write_run(exp, {"host_tier_gib": 5}, 3, summary={"makespan_s": 1.0}, experiment="other")
    # planned folders holding another experiment's, point's, repeat's and trace's runs
    write_run(exp, {"host_tier_gib": 10}, 1, summary={"makespan_s": 1.0}, experiment="other")
    res = load_results(exp)
    assert sorted(res.runs["makespan_s"]) == [9.0, 10.0, 10.0]
    left = [n for n in res.notes if "left out" in n]
    assert len(left) == 2
    assert any("host_tier_gib=5/r3" in n and "plan.json lists no such run" in n for n in left)
    assert any("host_tier_gib=10/r1" in n and "experiment 'other'" in n for n in left)
    # its folder holds another sweep's run: left out, with why, not "never started"
    assert res.not_started == []
    assert [rel for rel, _ in res.left_out] == ["host_tier_gib=10/r1", "host_tier_gib=5/r3"]

    def run_json(rel: str) -> dict:
        return json.loads((exp / rel / "run.json").read_text())

    for rel, change, why in [
        ("host_tier_gib=10/r1", {"experiment": "e", "point": {"host_tier_gib": 5}}, "point"),
        ("host_tier_gib=10/r1", {"point": {"host_tier_gib": 10}, "repeat": 0}, "repeat r0"),
        ("host_tier_gib=10/r1", {"repeat": 1, "provenance": {"trace_sha256": "cd" * 32}},
         "trace cdcdcdcdcdcd"),
    ]:  # fmt: skip
        doc = run_json(rel) | change
        (exp / rel / "run.json").write_text(json.dumps(doc))
        res = load_results(exp)
        assert sorted(res.runs["makespan_s"]) == [9.0, 10.0, 10.0], why
        assert any(why in n for n in res.notes if "left out" in n), (why, res.notes)


def test_a_run_json_that_is_not_an_object_says_so(tmp_path):
    exp = tmp_path / "e"
    run_dir = write_run(exp, {"host_tier_gib": 5}, 0, summary={"makespan_s": 1.0},
                        counters={"host_restore_tokens": "n/a"})  # fmt: skip
    res = load_results(exp)
    assert any("host_restore_tokens: not a number" in n for n in res.notes)
    (run_dir / "run.json").write_text("[1, 2, 3]")
    res = load_results(exp)
    assert res.runs["status"].iloc[0] == "unreadable"
    assert "not an object" in res.runs["error"].iloc[0]


def test_calls_from_jsonl_skip_a_torn_last_line(tmp_path):
    rows = make_calls(1, 3)
    write_run(tmp_path, {"a": 1}, 0, summary={}, calls=rows, calls_format="jsonl")
    run_dir = tmp_path / "a=1" / "r0"
    with open(run_dir / "calls.jsonl", "a") as f:
        f.write('{"slot": 0, "t_se')  # the process died mid-write
    calls = load_calls(run_dir)
    assert len(calls) == 3 and list(calls["call"]) == [0, 1, 2]


def test_calls_prefer_parquet(tmp_path):
    run_dir = write_run(tmp_path, {"a": 1}, 0, summary={}, calls=make_calls(2, 2))
    assert len(load_calls(run_dir)) == 4


def test_single_run_directory_is_a_one_point_result(tmp_path):
    run_dir = tmp_path / "one"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({"status": "ok", "summary": {"makespan_s": 3.0}}))
    res = load_results(run_dir)
    assert len(res.runs) == 1 and res.params == () and res.runs["makespan_s"].iloc[0] == 3.0


def test_a_single_runs_engine_is_read_from_its_provenance(tmp_path):
    """`replay run` records its engine in provenance (a sweep also at the top): the report of a
    single run said "engine: not recorded"."""
    run_dir = tmp_path / "one"
    run_dir.mkdir()
    doc = {"status": "ok", "summary": {"makespan_s": 3.0}, "provenance": {"engine": "vllm"}}
    (run_dir / "run.json").write_text(json.dumps(doc))
    assert load_results(run_dir).runs["engine"].iloc[0] == "vllm"


def test_summary_table_is_the_fallback(tmp_path):
    exp = tmp_path / "e"
    exp.mkdir()
    pd.DataFrame(
        {
            "experiment": ["e", "e"],
            "point": ["host_tier_gib=5", "host_tier_gib=5"],
            "repeat": ["r0", "r1"],
            "host_tier_gib": [5, 5],
            "status": ["ok", "ok"],
            "makespan_s": [1.0, 2.0],
        }
    ).to_parquet(exp / "summary.parquet")
    res = load_results(exp)
    assert res.params == ("host_tier_gib",) and list(res.runs["makespan_s"]) == [1.0, 2.0]


def test_missing_or_empty_directory_is_a_user_error(tmp_path):
    with pytest.raises(ConfigError, match="no such results directory"):
        load_results(tmp_path / "nope")
    with pytest.raises(ReplayError, match="no runs found"):
        load_results(tmp_path)


def test_a_calls_parquet_cut_short_is_noted_and_its_jsonl_read(tmp_path):
    run_dir = write_run(tmp_path, {"a": 1}, 0, summary={}, calls=make_calls(1, 3))
    (run_dir / "calls.jsonl").write_text("".join(json.dumps(c) + "\n" for c in make_calls(1, 3)))
    whole = (run_dir / "calls.parquet").read_bytes()
    (run_dir / "calls.parquet").write_bytes(whole[: len(whole) // 2])
    res = load_results(tmp_path)
    assert any("a=1/r0/calls.parquet: unreadable" in n for n in res.notes), res.notes
    assert len(load_calls(run_dir)) == 3  # from the jsonl
    (run_dir / "calls.parquet").write_bytes(whole)
    assert not any("calls.parquet" in n for n in load_results(tmp_path).notes)


def test_a_summary_csv_cut_short_loses_its_torn_row_not_its_cells(tmp_path):
    exp = tmp_path / "e"
    exp.mkdir()
    table = pd.DataFrame(
        {"point": ["host_tier_gib=5"] * 2, "repeat": ["r0", "r1"], "host_tier_gib": [5, 5],
         "status": ["ok", "ok"], "makespan_s": [1.0, 2.0], "calls": [10, 10]}
    )  # fmt: skip
    table.to_csv(exp / "summary.csv", index=False)
    assert list(load_results(exp).runs["makespan_s"]) == [1.0, 2.0]
    text = (exp / "summary.csv").read_text()
    (exp / "summary.csv").write_text(text[: text.rindex(",")])  # the last row's last cell lost
    res = load_results(exp)
    assert list(res.runs["makespan_s"]) == [1.0]
    assert any("cut short" in n for n in res.notes)


def test_a_sweep_stopped_before_its_first_run_says_so(tmp_path):
    (tmp_path / "plan.json").write_text(json.dumps({"runs": ["a=1/r0", "a=2/r0"]}))
    with pytest.raises(ConfigError, match="plan.json lists 2 and none has started"):
        load_results(tmp_path)
