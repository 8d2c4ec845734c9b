"""The call record type is the one source of the results columns; statuses and error kinds are
StrEnums whose values are the strings results files hold."""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from replay.clock import run_virtual
from replay.driver.options import RunOptions
from replay.driver.pool import replay
from replay.driver.records import (
    CALL_COLUMNS,
    CALL_SCHEMA,
    CallRecord,
    JsonlSink,
    arrow_schema,
    read_jsonl,
    summarize,
    write_parquet,
)
from replay.errors import ErrorKind, RequestFailed
from replay.status import CallStatus, RunStatus
from tests.servers import ScriptedTransport, make_trace

DOCS = Path(__file__).resolve().parents[1] / "docs" / "results.md"

OK_FIELDS = dict(
    task="a", call=0, slot=0, t_ready=0.0, t_send=0.0, t_first_token=0.1, t_end=0.5,
    drift_s=0.0, prompt_tokens=10, prompt_tokens_reported=10, max_tokens=2,
    completion_tokens=2, cached_tokens=0, device_hit_tokens=0, host_restore_tokens=0,
    exact_match=None, status=CallStatus.OK, error_kind=None, error=None,
)  # fmt: skip


def _documented(section_start: str, outside_parentheses: bool = False) -> list[str]:
    """The backquoted names in the docs/results.md paragraph that starts with `section_start`
    (the values a column takes are listed in parentheses after it)."""
    text = DOCS.read_text()
    para = text[text.index(section_start) :].split("\n\n", 1)[0]
    if outside_parentheses:
        para = re.sub(r"\([^)]*\)", "", para)
    return re.findall(r"`([a-z_0-9]+)`", para)


def test_columns_are_the_record_fields_in_the_documented_order():
    fields = list(CallRecord._fields)
    assert list(CALL_COLUMNS) == fields == CALL_SCHEMA.names
    assert _documented("Call row columns:", outside_parentheses=True) == fields


def _values_of(column: str) -> list[str]:
    """The values docs/results.md lists in parentheses after the column's name."""
    para = " ".join(DOCS.read_text().split())
    listed = re.search(rf"`{column}` \(([^)]*)\)", para)
    assert listed, column
    return re.findall(r"`([a-z_0-9]+)`", listed.group(1))


def test_enum_values_are_the_documented_strings():
    assert sorted(_values_of("error_kind")) == sorted(ErrorKind)
    assert sorted(_values_of("status")) == sorted(CallStatus)
    run_statuses = _documented("`run.json` `status`:")
    assert set(RunStatus) <= set(run_statuses)


def test_schema_types_follow_the_annotations():
    types = dict(zip(CALL_SCHEMA.names, CALL_SCHEMA.types, strict=True))
    assert types["call"] == types["slot"] == pa.int32()
    assert types["prompt_tokens"] == types["completion_tokens"] == pa.int64()
    assert types["t_end"] == types["exact_match"] == pa.float64()
    assert types["status"] == types["error_kind"] == types["task"] == pa.string()
    assert all(f.nullable for f in CALL_SCHEMA)


def test_a_misspelt_field_fails_where_the_record_is_built():
    fields = dict(OK_FIELDS)
    fields["prompt_token"] = fields.pop("prompt_tokens")
    with pytest.raises(TypeError, match="prompt_token"):
        CallRecord(**fields)


def test_a_misspelt_key_fails_when_written_instead_of_a_null_column(tmp_path):
    row = CallRecord(**OK_FIELDS).as_row()
    row["cahced_tokens"] = row.pop("cached_tokens")
    with pytest.raises(ValueError, match="cahced_tokens"):
        write_parquet([row], tmp_path / "calls.parquet")
    assert not (tmp_path / "calls.parquet").exists()


def test_rows_written_before_a_column_existed_still_convert(tmp_path):
    row = CallRecord(**OK_FIELDS).as_row()
    del row["prompt_tokens_reported"]  # an older row without that column
    write_parquet([row], tmp_path / "calls.parquet")
    table = pq.read_table(tmp_path / "calls.parquet")
    assert table.column("prompt_tokens_reported").to_pylist() == [None]
    assert table.column("prompt_tokens").to_pylist() == [10]


def test_an_annotation_with_no_arrow_type_is_refused():
    class Bad(NamedTuple):
        task: str
        tags: list[str]

    with pytest.raises(TypeError, match="Bad.tags"):
        arrow_schema(Bad)


def test_records_are_frozen_and_rows_hold_plain_strings():
    rec = CallRecord(
        **dict(
            OK_FIELDS,
            status=CallStatus.ERROR,
            error_kind=ErrorKind.HTTP_5XX,
            error="http_5xx: HTTP 500: boom",
        )
    )
    with pytest.raises(AttributeError):
        rec.status = CallStatus.OK  # type: ignore[misc]
    row = rec.as_row()
    assert list(row) == list(CALL_COLUMNS)
    assert type(row["status"]) is str and type(row["error_kind"]) is str
    assert orjson.loads(orjson.dumps(row))["error_kind"] == "http_5xx"


def test_request_failed_takes_known_kinds_only():
    e = RequestFailed("timeout", "no complete response within 5 s")
    assert e.kind is ErrorKind.TIMEOUT and str(e) == "timeout: no complete response within 5 s"
    assert RequestFailed(ErrorKind.CANCELLED, "x").kind == "cancelled"
    with pytest.raises(ValueError, match="timout"):
        RequestFailed("timout", "misspelt kind")


def test_pool_rows_stream_to_jsonl_and_parquet_with_plain_values(tmp_path):
    trace = make_trace({"a": [{}, {}, {}], "b": [{}, {}]})
    sink = JsonlSink(tmp_path / "calls.jsonl")
    transport = ScriptedTransport(fail={("a", 1): "http_5xx", ("b", 0): "timeout"})
    result = run_virtual(lambda: replay(trace, transport, RunOptions(pool=2), sink))
    sink.close()
    assert result.status == RunStatus.ERRORS == "errors"
    assert [list(r) for r in result.rows] == [list(CALL_COLUMNS)] * 5
    by_ref = {(r["task"], r["call"]): r for r in result.rows}
    assert by_ref[("a", 1)]["error_kind"] == "http_5xx" and by_ref[("a", 1)]["status"] == "error"
    assert by_ref[("b", 0)]["error_kind"] == "timeout"
    assert by_ref[("a", 0)]["status"] == "ok" and by_ref[("a", 0)]["error_kind"] is None
    assert all(type(r["status"]) is str for r in result.rows)
    # the file holds the same rows; the summary of either serializes (error_kinds keys are str)
    assert read_jsonl(tmp_path / "calls.jsonl") == result.rows
    summary = summarize(result.rows)
    assert summary["error_kinds"] == {"http_5xx": 1, "timeout": 1}
    assert orjson.loads(orjson.dumps(summary))["errors"] == 2
    write_parquet(result.rows, tmp_path / "calls.parquet")
    table = pq.read_table(tmp_path / "calls.parquet")
    assert table.schema.equals(CALL_SCHEMA)
    assert sorted(table.column("error_kind").drop_null().to_pylist()) == ["http_5xx", "timeout"]


def test_every_key_of_a_simulated_runs_run_json_is_documented(tmp_path):
    """run.json's top-level keys and every `summary` key of an in-process simulator run (the
    run with the most keys: the simulator's extras) are named in docs/results.md."""
    import orjson

    from replay.driver.options import RunOptions
    from replay.sim.options import SimConfig
    from replay.trace.synth import synth
    from tests.sim_helpers import replay_on_sim

    trace = synth("swe-agent", tasks=3, seed=1, scale=0.05, max_calls_per_task=4)
    cfg = SimConfig(device_kv_gib=0.05, host_tier_gib=0.1, admission="fixed")
    replay_on_sim(trace, cfg, RunOptions(pool=2, forcing=True), tmp_path)
    doc = orjson.loads((tmp_path / "run.json").read_bytes())
    text = " ".join(DOCS.read_text().split())
    named = set(re.findall(r"`([a-z_0-9]+)`", text))
    assert set(doc) - named == set()
    assert set(doc["summary"]) - named == set()
