"""Turning last-byte sync off where a user does: `replay run --no-last-byte-sync` (a real run over
loopback, the server noting when each request's head and last byte arrive) and `[run]
last_byte_sync` in an experiment file; run.json records the value used either way."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from replay.errors import ConfigError
from replay.sweep.config import load_experiment
from replay.sweep.runner import run_sweep
from replay.trace.io import write_trace
from tests.test_driver_cli import sim_server  # noqa: F401 - fixture
from tests.test_driver_last_byte import LEAD_S, LastByteServer, _open_trace, lead  # noqa: F401

LONG = ("t0", "t1")  # the calls long enough to be staged


def _replay(argv: list[str], capsys) -> tuple[int, str]:
    """`replay ARGV` in this process (so the test's staging lead applies): exit code, stderr."""
    from replay.cli.main import main

    try:
        main(argv)
    except SystemExit as e:
        return int(e.code or 0), capsys.readouterr().err
    return 0, capsys.readouterr().err


def _config(run_dir: Path) -> dict:
    return orjson.loads((run_dir / "run.json").read_bytes())["config"]


@pytest.mark.parametrize("flag", [None, "--last-byte-sync", "--no-last-byte-sync"])
def test_the_run_flag_decides_whether_requests_go_whole(tmp_path, monkeypatch, capsys, lead, flag):  # noqa: F811
    monkeypatch.delenv("REPLAY_LAST_BYTE_SYNC", raising=False)
    trace = tmp_path / "t.jsonl"
    write_trace(_open_trace([20_000, 20_000, 100], [0.5, 0.5, 0.5]), trace)
    out = tmp_path / "run"
    argv = ["run", "--trace", str(trace), "--pool", "4", "--out", str(out), "--json"]
    with LastByteServer() as srv:
        code, err = _replay([*argv, "--url", srv.url, *([flag] if flag else [])], capsys)
    on = flag != "--no-last-byte-sync"
    assert code == 0, err
    assert _config(out)["last_byte_sync"] is on
    got = {a.user: a for a in srv.arrivals}
    assert sorted(got) == ["first", "t0", "t1", "t2"]
    # staged: head and body a lead early, the last byte at the deadline; whole: all at once
    gaps_s = {task: got[task].t_last - got[task].t_head for task in LONG}
    if on:
        assert max(gaps_s.values()) >= LEAD_S / 2, gaps_s
    else:
        assert max(gaps_s.values()) < LEAD_S / 2, gaps_s


def test_the_run_flag_reaches_each_repeat(tmp_path, monkeypatch, capsys, sim_server):  # noqa: F811
    monkeypatch.delenv("REPLAY_LAST_BYTE_SYNC", raising=False)
    trace = tmp_path / "t.jsonl"
    write_trace(_open_trace([100, 100], [0.5, 0.5]), trace)
    out = tmp_path / "rep"
    # a server's run: the in-process simulator has no HTTP and refuses the flag
    argv = ["run", "--trace", str(trace), "--pool", "2", "--out", str(out), "--url", sim_server]
    code, err = _replay([*argv, "--repeats", "2", "--no-last-byte-sync"], capsys)
    assert code == 0, err
    assert "last_byte_sync = false" in (out / "experiment.toml").read_text()
    runs = sorted(out.glob("default/r*"))
    assert len(runs) == 2
    assert [_config(r)["last_byte_sync"] for r in runs] == [False, False]


EXPERIMENT = """\
name = "sync"
repeats = 1
[trace]
synth = {{ preset = "swe-agent", tasks = 2, seed = 1, max_calls_per_task = 3 }}
[run]
pool = 2
{run}
[engine]
kind = "sim"
[matrix]
{matrix}
"""


def _sweep_configs(tmp_path: Path, run: str = "", matrix: str = "host_tier_gib = [0]") -> list:
    path = tmp_path / "sync.toml"
    path.write_text(EXPERIMENT.format(run=run, matrix=matrix))
    result = run_sweep(load_experiment(path), results_root=tmp_path / "res", echo=lambda s: None)
    assert [o.status for o in result.outcomes] == ["ok"] * len(result.outcomes)
    return sorted(
        (o.rel_dir, _config(result.exp_dir / o.rel_dir)["last_byte_sync"]) for o in result.outcomes
    )


@pytest.mark.parametrize(
    ("run", "env", "on"),
    [("", None, True), ("", "off", False), ("last_byte_sync = true", "off", True),
     ("last_byte_sync = false", None, False)],
)  # fmt: skip
def test_the_experiment_file_sets_it_over_the_environment(tmp_path, monkeypatch, run, env, on):
    monkeypatch.delenv("REPLAY_LAST_BYTE_SYNC", raising=False)
    if env is not None:
        monkeypatch.setenv("REPLAY_LAST_BYTE_SYNC", env)
    assert [v for _, v in _sweep_configs(tmp_path, run)] == [on]


def test_the_matrix_can_sweep_it(tmp_path, monkeypatch):
    monkeypatch.delenv("REPLAY_LAST_BYTE_SYNC", raising=False)
    got = _sweep_configs(tmp_path, matrix="last_byte_sync = [true, false]")
    assert got == [("last_byte_sync=false/r0", False), ("last_byte_sync=true/r0", True)]


def test_a_value_that_is_not_a_boolean_names_its_key(tmp_path):
    path = tmp_path / "sync.toml"
    path.write_text(EXPERIMENT.format(run='last_byte_sync = "no"', matrix="host_tier_gib = [0]"))
    with pytest.raises(ConfigError) as e:
        load_experiment(path)
    assert e.value.field == "run.last_byte_sync" and "boolean" in e.value.why
