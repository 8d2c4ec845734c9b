"""Setting the real-time loop's spin where a user does: `replay run --timer-spin-s` and `[run]
timer_spin_s` in an experiment file; run.json records the value used, and a value out of range is
refused naming its option. A run reports the share of its time it spent polling, and the drift
diagnosis does not count that as client CPU saturation. (What the spin does to a wait:
tests/test_driver_fine_timer.py.)"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from replay.driver.options import MAX_TIMER_SPIN_S, TIMER_SPIN_S, RunOptions
from replay.driver.run import run_replay
from replay.errors import ConfigError
from replay.sweep.config import load_experiment
from replay.sweep.runner import run_sweep
from replay.trace.io import write_trace
from tests.cli_batch import run_one
from tests.servers import ScriptedTransport, make_trace
from tests.test_driver_cli import sim_server  # noqa: F401 - fixture
from tests.test_driver_last_byte_switch import EXPERIMENT  # a small sim sweep: [run] and [matrix]

ONE_POINT = "host_tier_gib = [0]"


def _spin(run_dir: Path) -> float:
    return orjson.loads((run_dir / "run.json").read_bytes())["config"]["timer_spin_s"]


@pytest.mark.parametrize("value", [None, "0", "0.002"])
def test_the_run_flag_reaches_run_json(tmp_path, value, sim_server):  # noqa: F811
    trace = tmp_path / "t.jsonl"
    write_trace(make_trace({"a": [{}, {}]}), trace)
    out = tmp_path / "run"
    # a server's run: the in-process simulator runs in virtual time and refuses the flag
    argv = ["run", "--trace", str(trace), "--pool", "1", "--out", str(out), "--url", sim_server]
    got = run_one(str(tmp_path), [*argv, *(["--timer-spin-s", value] if value else [])])
    assert got["code"] == 0, got["err"]
    assert _spin(out) == (TIMER_SPIN_S if value is None else float(value))


@pytest.mark.parametrize("value", ["-0.001", str(MAX_TIMER_SPIN_S * 2)])
def test_a_spin_out_of_range_is_refused_naming_the_flag(tmp_path, value):
    trace = tmp_path / "t.jsonl"
    write_trace(make_trace({"a": [{}]}), trace)
    out = tmp_path / "run"
    argv = ["run", "--trace", str(trace), "--pool", "1", "--out", str(out), "--engine", "sim"]
    got = run_one(str(tmp_path), [*argv, "--timer-spin-s", value])
    assert got["code"] == 2 and "--timer-spin-s" in got["err"], got["err"]
    assert not out.exists()


def test_the_experiment_file_sets_it(tmp_path):
    path = tmp_path / "spin.toml"
    path.write_text(EXPERIMENT.format(run="timer_spin_s = 0.0", matrix=ONE_POINT))
    result = run_sweep(load_experiment(path), results_root=tmp_path / "res", echo=lambda s: None)
    assert [o.status for o in result.outcomes] == ["ok"]
    assert [_spin(result.exp_dir / o.rel_dir) for o in result.outcomes] == [0.0]


def test_an_experiment_spin_out_of_range_names_its_key(tmp_path):
    path = tmp_path / "spin.toml"
    path.write_text(EXPERIMENT.format(run="timer_spin_s = 0.5", matrix=ONE_POINT))
    with pytest.raises(ConfigError) as e:
        load_experiment(path)
    assert e.value.field == "run.timer_spin_s", e.value


def _short_waits(out: Path, spin_s: float, drift_warn_s: float = 0.010) -> dict:
    """30 calls of 5 ms after 5 ms gaps: every wait shorter than the longest spin; prompts of
    a few tokens, quick to encode."""
    trace = make_trace({"a": [{"gap": 0.005, "new": 1, "out": 1}] * 30})
    opts = RunOptions(pool=1, timer_spin_s=spin_s, drift_warn_s=drift_warn_s)
    return run_replay(trace, lambda: ScriptedTransport(ttft_s=0.005, per_token_s=0.0), opts, out)


def test_a_run_reports_the_share_of_its_time_spent_polling(tmp_path):
    polled = _short_waits(tmp_path / "polled", MAX_TIMER_SPIN_S)
    slept = _short_waits(tmp_path / "slept", 0.0)
    assert polled["status"] == slept["status"] == "ok"
    assert slept["client_spin_fraction"] == 0.0
    # most of the run is waits polled whole
    assert 0.3 <= polled["client_spin_fraction"] <= 1.0
    doc = orjson.loads((tmp_path / "polled" / "run.json").read_bytes())
    assert doc["summary"]["client_spin_fraction"] == polled["client_spin_fraction"]


def test_polling_is_not_diagnosed_as_client_cpu_saturation(tmp_path):
    # a drift limit of 20 us makes the diagnosis run (and no prompt here takes half of it to
    # encode); the process is on the CPU nearly all the run, polling, which says nothing about
    # whether it had CPU to spare
    got = _short_waits(tmp_path / "r", MAX_TIMER_SPIN_S, drift_warn_s=2e-5)
    assert got["drift_cause"] in ("machine", "transport"), got["warnings"]
    assert got["client_cpu_fraction"] - got["client_spin_fraction"] < 0.85
