"""Results written by an older replay (tests/fixtures/results-before-records) still load, summarize
and report exactly as they did when they were written."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from replay.analysis.load import load_calls, load_results
from replay.driver.records import CALL_SCHEMA, read_jsonl, summarize, write_parquet
from replay.report import write_report
from replay.sweep.config import load_experiment
from replay.sweep.summary import summary_rows

OLD = Path(__file__).resolve().parent / "fixtures" / "results-before-records" / "tiny"
RUN_DIRS = sorted(p.parent for p in OLD.glob("*/r*/run.json"))


def test_fixture_holds_ok_and_error_runs():
    statuses = sorted(orjson.loads((d / "run.json").read_bytes())["status"] for d in RUN_DIRS)
    assert statuses == ["errors"] * 4 + ["ok"] * 4


@pytest.mark.parametrize("run_dir", RUN_DIRS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_old_calls_convert_to_the_same_parquet(run_dir, tmp_path):
    old = pq.read_table(run_dir / "calls.parquet")
    # columns added since (token-level stream times) come after the old ones, null for old rows
    added = CALL_SCHEMA.names[len(old.schema) :]
    assert added == ["t_second_token", "t_last_token", "stream_tokens"]
    assert old.schema.equals(pa.schema(list(CALL_SCHEMA)[: len(old.schema)]))
    write_parquet(read_jsonl(run_dir / "calls.jsonl"), tmp_path / "calls.parquet")
    new = pq.read_table(tmp_path / "calls.parquet")
    assert new.select(old.schema.names).equals(old)
    assert all(new.column(c).null_count == len(new) for c in added)


@pytest.mark.parametrize("run_dir", RUN_DIRS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_old_calls_summarize_to_the_recorded_summary(run_dir):
    doc = orjson.loads((run_dir / "run.json").read_bytes())
    counters = orjson.loads((run_dir / "counters.json").read_bytes())
    got = summarize(read_jsonl(run_dir / "calls.jsonl"), counters=counters)
    recorded = {k: v for k, v in doc["summary"].items() if k in got}
    # Keys the summary gained after these results were written (usage and latency detail) are
    # additive; the simulator answered every call with usage.
    added = set(got) - set(doc["summary"])
    assert got["usage_missing"] == 0
    got = {k: v for k, v in got.items() if k not in added}
    assert orjson.loads(orjson.dumps(got)) == recorded


def test_old_calls_load_for_analysis():
    calls = pd.concat([load_calls(d) for d in RUN_DIRS])
    assert set(calls["status"]) == {"ok", "error"}
    assert set(calls.loc[calls["status"] == "error", "error_kind"]) == {"http_4xx"}
    assert calls.loc[calls["status"] == "ok", "error_kind"].isna().all()


def test_old_sweep_summary_is_rebuilt_the_same():
    old = pd.read_parquet(OLD / "summary.parquet")
    new = pd.DataFrame(summary_rows(load_experiment(OLD / "experiment.toml"), OLD))
    pd.testing.assert_frame_equal(new, old)


def test_old_results_report_the_same(tmp_path):
    copy = tmp_path / "tiny"
    shutil.copytree(OLD, copy)
    (copy / "report.md").unlink()
    assert len(load_results(copy).runs) == 8
    write_report(copy, figures=False)
    assert (copy / "report.md").read_text() == (OLD / "report.md").read_text()
