"""`replay trace ...` as a user runs it: real subprocesses, exit codes, one-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

from replay.trace.stats import TraceStats

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _replay(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "replay.cli.main", "trace", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_synth_validate_stats(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl.gz"
    r = _replay(
        "synth", "--preset", "claude-code", "--tasks", "3", "--seed", "4", "--scale", "0.02",
        "-o", str(out), cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert out.exists()
    r = _replay("validate", str(out), cwd=tmp_path)
    assert r.returncode == 0 and "ok" in r.stdout
    r = _replay("stats", str(out), "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    stats = orjson.loads(r.stdout)
    assert set(stats) == set(TraceStats.__dataclass_fields__)
    assert stats["tasks"] >= 3 and stats["calls"] > 3
    r = _replay("stats", str(out), cwd=tmp_path)
    assert r.returncode == 0 and "reuse_fraction" in r.stdout


def test_validate_prints_file_line_field_why_and_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"format": "replay-trace", "version": 1, "tokens": "ids", "vocab_size": 100}\n'
        '{"task": "a", "call": 0, "gap_s": -1, "keep": 0, "append": [1], "output_len": 1}\n'
    )
    r = _replay("validate", str(bad), cwd=tmp_path)
    assert r.returncode == 2
    assert r.stdout.strip() == f"{bad}:2: gap_s: must be a finite number >= 0, got -1.0"
    assert "Traceback" not in r.stderr


def test_bad_input_never_prints_a_traceback(tmp_path: Path) -> None:
    r = _replay("synth", "--preset", "nope", "-o", str(tmp_path / "x.jsonl"), cwd=tmp_path)
    assert r.returncode == 2 and "swe-agent" in r.stderr and "Traceback" not in r.stderr
    r = _replay("stats", str(tmp_path / "missing.jsonl"), cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("replay: ") and "Traceback" not in r.stderr


def test_import_efficientagent(tmp_path: Path) -> None:
    out = tmp_path / "ea.jsonl.gz"
    r = _replay(
        "import", "--from", "efficientagent", str(FIXTURES / "efficientagent"), "-o", str(out),
        cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = _replay("stats", str(out), "--json", cwd=tmp_path)
    assert orjson.loads(r.stdout)["calls"] == 12  # tests/fixtures/efficientagent: 3 tasks x 4
