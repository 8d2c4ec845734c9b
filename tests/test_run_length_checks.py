"""Lengths the server did not confirm are never a silent `ok`: against real loopback servers that
miscount the prompt, send no usage or fail /v1/models, `replay run` warns in run.json and on
stderr, and `--strict` fails the run (or refuses to start it)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from replay.cli.main import main
from replay.driver.records import read_jsonl
from replay.trace.io import write_trace
from tests.servers import FaultServer, make_trace


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("trace") / "t.jsonl.gz"
    write_trace(make_trace({"a": [{}, {}, {}], "b": [{}, {}]}), path)
    return path


def _run(trace_file: Path, out: Path, srv: FaultServer, capsys, *extra: str) -> tuple[int, str]:
    argv = ["run", "--trace", str(trace_file), "--pool", "2", "--out", str(out)]
    with pytest.raises(SystemExit) as e:
        main([*argv, "--url", srv.url, "--gap-scale", "0", "--json", *extra])
        raise SystemExit(0)
    return int(e.value.code or 0), capsys.readouterr().err


def _run_json(out: Path) -> dict:
    return orjson.loads((out / "run.json").read_bytes())


def _warnings(doc: dict) -> list[str]:
    """The run's warnings but send drift (a loaded test machine may add that one)."""
    return [w for w in doc["summary"]["warnings"] if "send drift" not in w]


def test_prompt_tokens_off_by_7_warns_and_strict_fails(trace_file, tmp_path, capsys):
    with FaultServer(prompt_tokens_offset=7) as srv:
        code, err = _run(trace_file, tmp_path / "warn", srv, capsys)
        assert code == 0
        doc = _run_json(tmp_path / "warn")
        assert doc["status"] == "ok" and doc["summary"]["prompt_mismatches"] == 5
        (w,) = _warnings(doc)
        assert w.startswith("5 of 5 calls: the server reported other prompt tokens than sent")
        assert "sent 8, reported 15" in w
        assert f"replay: warning: {w}\n" in err

        code, err = _run(trace_file, tmp_path / "strict", srv, capsys, "--strict")
        doc = _run_json(tmp_path / "strict")
        assert code == 1 and doc["status"] == "failed"
        assert doc["reason"].startswith("--strict: length mismatch on ")


def test_missing_usage_warns_and_strict_fails(trace_file, tmp_path, capsys):
    with FaultServer(send_usage=False) as srv:
        code, err = _run(trace_file, tmp_path / "warn", srv, capsys)
        doc = _run_json(tmp_path / "warn")
        assert code == 0 and doc["status"] == "ok"
        assert doc["summary"]["usage_missing"] == 5 and doc["summary"]["prompt_mismatches"] == 0
        (w,) = _warnings(doc)
        assert "5 of 5 calls: the server sent no usage" in w and w in err

        code, err = _run(trace_file, tmp_path / "strict", srv, capsys, "--strict")
        doc = _run_json(tmp_path / "strict")
        assert code == 1 and doc["status"] == "failed"
        assert doc["reason"].startswith("--strict: no usage to check lengths on ")
        rows = read_jsonl(tmp_path / "strict/calls.jsonl")
        assert rows[0]["error_kind"] == "length_mismatch"
        assert "no usage in the response" in rows[0]["error"]
        # the calls the strict run failed for having no usage are counted as such (were 0)
        unchecked = [r for r in rows if r["error_kind"] == "length_mismatch"]
        assert doc["summary"]["usage_missing"] == len(unchecked) >= 1


def test_failing_models_endpoint_warns_and_strict_refuses_to_start(trace_file, tmp_path, capsys):
    with FaultServer(models_status=500) as srv:
        code, err = _run(trace_file, tmp_path / "warn", srv, capsys)
        doc = _run_json(tmp_path / "warn")
        assert code == 0 and doc["status"] == "ok"
        assert all("model" not in s.body for s in srv.seen) and len(srv.seen) == 5
        (w,) = _warnings(doc)
        assert w.startswith(f"GET {srv.url}/v1/models gave no model id: requests carry no")
        assert w in err

        code, err = _run(trace_file, tmp_path / "strict", srv, capsys, "--strict")
        assert code == 2 and len(srv.seen) == 5  # nothing more was sent
        assert err == (
            f"replay: run: --served-model: GET {srv.url}/v1/models gave no model id; "
            "give --served-model NAME\n"
        )
        assert not (tmp_path / "strict").exists()


def test_a_server_that_matches_gets_no_warning(trace_file, tmp_path, capsys):
    with FaultServer() as srv:
        code, err = _run(trace_file, tmp_path / "ok", srv, capsys)
    doc = _run_json(tmp_path / "ok")
    assert code == 0 and _warnings(doc) == [] and doc["summary"]["usage_missing"] == 0
    assert "mismatch" not in err and "usage" not in err


def test_more_cached_tokens_than_the_prompt_warns(trace_file, tmp_path, capsys):
    """A hit rate above 100% was accepted without a word."""
    with FaultServer(cached_tokens=10_000) as srv:
        code, err = _run(trace_file, tmp_path / "over", srv, capsys)
    doc = _run_json(tmp_path / "over")
    assert code == 0 and doc["status"] == "ok"
    (w,) = _warnings(doc)
    assert w.startswith("5 of 5 calls: the server reported more cached tokens than the prompt")
    assert "cached 10000" in w and w in err
