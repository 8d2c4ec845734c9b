"""Times a trace can hold: huge gaps and epoch arrival times run in virtual time (they spun
forever once the clock passed 2**24 s); absurd ones are refused with FILE:LINE: field: why."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pandas as pd
import pytest

from replay.trace.io import write_trace
from tests.servers import make_trace

ROOT = Path(__file__).resolve().parents[1]
REPLAY = [sys.executable, "-m", "replay.cli.main"]


def _replay(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*REPLAY, *args], capture_output=True, text=True, timeout=60, cwd=ROOT)


def _write(tmp_path: Path, tasks: dict) -> Path:
    path = tmp_path / "t.jsonl"
    write_trace(make_trace(tasks), path)
    return path


def _sim_run(path: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return _replay(
        "run", "--trace", str(path), "--pool", "1", "--out", str(out), "--engine", "sim",
        "--json", *extra,
    )  # fmt: skip


@pytest.mark.timeout(90)
def test_a_gap_of_a_year_runs_in_virtual_time(tmp_path):
    path = _write(tmp_path, {"a": [{}, {"gap": 3e7}, {"gap": 3e7}]})
    cp = _sim_run(path, tmp_path / "run")
    assert cp.returncode == 0, cp.stderr
    rows = pd.read_parquet(tmp_path / "run" / "calls.parquet").sort_values("call")
    sends = rows["t_send"].tolist()
    assert sends[1] - rows["t_end"].iloc[0] == 3e7  # exactly the gap: the clock lands on it
    assert sends[2] > 6e7


@pytest.mark.timeout(90)
def test_epoch_arrival_times_are_counted_from_the_first_arrival(tmp_path):
    t0 = 1.7e9  # a Mooncake file's epoch milliseconds, divided by 1000
    path = _write(
        tmp_path,
        {"a": [{"at": t0 + 0.5}, {"at": t0 + 2.0}], "b": [{"at": t0}], "c": [{"at": t0 + 1.0}]},
    )
    cp = _sim_run(path, tmp_path / "run")
    assert cp.returncode == 0, cp.stderr
    rows = pd.read_parquet(tmp_path / "run" / "calls.parquet")
    sends = {(r.task, r.call): r.t_send for r in rows.itertuples()}
    assert sends == {("b", 0): 0.0, ("a", 0): 0.5, ("c", 0): 1.0, ("a", 1): 2.0}
    assert orjson.loads(cp.stdout)["status"] == "ok"


@pytest.mark.parametrize(
    "tasks, field",
    [
        ({"a": [{}, {"gap": 3e9}]}, "gap_s"),
        ({"a": [{"tail": 2e9}]}, "tail_gap_s"),
        ({"a": [{"at": 1.7e12}]}, "at_s"),  # epoch milliseconds given as seconds
    ],
)
def test_absurd_seconds_are_refused_with_file_line_field(tmp_path, tasks, field):
    path = _write(tmp_path, tasks)
    cp = _replay("trace", "validate", str(path))
    assert cp.returncode == 2
    line = len(next(iter(tasks.values()))) + 1  # the header is line 1
    assert cp.stdout.startswith(f"{path}:{line}: {field}: ")
    assert "not milliseconds" in cp.stdout


def test_arrivals_spread_over_more_than_the_limit_are_refused(tmp_path):
    path = _write(tmp_path, {"a": [{"at": 0.0}], "b": [{"at": 2e9}]})
    cp = _replay("trace", "validate", str(path))
    assert cp.returncode == 2 and cp.stdout.startswith(f"{path}:3: at_s: arrives 2e+09 s after")


def test_a_mix_of_open_and_closed_calls_is_refused_by_validate(tmp_path):
    path = _write(tmp_path, {"a": [{"at": 1.0}], "b": [{"gap": 1.0}]})
    cp = _replay("trace", "validate", str(path))
    assert cp.returncode == 2 and cp.stdout.startswith(f"{path}:3: at_s: 1 of 2 calls have")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("scale", ["inf", "nan", "-1", "1e7"])
def test_gap_scale_out_of_range_is_a_usage_error(tmp_path, scale):
    path = _write(tmp_path, {"a": [{}, {"gap": 1.0}]})
    cp = _sim_run(path, tmp_path / "run", "--gap-scale", scale)
    assert cp.returncode == 2
    assert "--gap-scale: must be in [0, 1e+06]" in cp.stderr and "Traceback" not in cp.stderr
