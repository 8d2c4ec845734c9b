"""Sweeps through real subprocesses and loopback HTTP: the simulator's server per run.

Covers the issue's acceptance tests: 3 tier sizes x 2 repeats end to end; a server killed mid-run
(run marked failed, sweep goes on, no process left, checked by PID); Ctrl-C then resume; a
server orphaned by a SIGKILLed sweep, stopped by the next sweep.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pandas as pd
import pytest
from click.testing import CliRunner

from replay.cli.main import cli
from replay.counters import CANONICAL_COUNTERS
from replay.sweep.config import load_experiment
from replay.sweep.prepare import load_trace
from replay.sweep.runner import run_sweep

ROOT = Path(__file__).resolve().parents[1]

TEMPLATE = """
name = "{name}"
repeats = {repeats}
seed = 3
[trace]
synth = {{ preset = "swe-agent", tasks = 4, seed = 1, max_calls_per_task = {calls}, max_prompt_tokens = 20000 }}
[run]
pool = 2
gap_scale = {gap_scale}
server_gone_grace_s = 0.5
interrupt_grace_s = 0.2
[engine]
kind = "sim-server"
tp = 8
device_kv_gib = 0.5
time_scale = 0.0
{engine_extra}
[matrix]
host_tier_gib = {tiers}
[timeouts]
ready_s = 60
stop_grace_s = 5
scrape_interval_s = 0.2
[predict]
enabled = {predict}
"""


def make(
    tmp_path,
    name="s",
    repeats=2,
    tiers="[0, 1, 4]",
    gap_scale=0.0,
    calls=5,
    extra="",
    predict=False,
    edit=lambda text: text,
):
    p = tmp_path / f"{name}.toml"
    p.write_text(
        edit(TEMPLATE.format(
            name=name, repeats=repeats, tiers=tiers, gap_scale=gap_scale, calls=calls,
            engine_extra=extra, predict=str(predict).lower(),
        ))
    )  # fmt: skip
    return load_experiment(p)


def run_json(path: Path) -> dict:
    return orjson.loads((path / "run.json").read_bytes())


def pid_running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def sim_servers_of(parent: int) -> list[int]:
    """PIDs of simulator servers whose parent is `parent` (from /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat[1]) == parent and b"replay.cli.sim_cmd" in cmd and stat[0] != "Z":
            out.append(int(entry.name))
    return out


def sweep_process(exp, results: Path, out=subprocess.PIPE) -> subprocess.Popen:
    """`replay sweep` of `exp` as a real process (its signals, its exit code)."""
    cmd = [sys.executable, "-m", "replay.cli.main", "sweep", exp.source, "--results", str(results)]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=out)


def servers_once_replaying(
    proc: subprocess.Popen, results: Path, name: str, timeout_s: float = 90
) -> list[int]:
    """The sweep's simulator servers, once run r0's metrics series exists (its replay runs)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if list(results.glob(f"{name}/*/r0/metrics.jsonl")):
            servers = sim_servers_of(proc.pid)
            if servers:
                return servers
        time.sleep(0.05)
    return []


def test_three_tiers_two_repeats_end_to_end(tmp_path):
    exp = make(tmp_path, predict=True)
    result = run_sweep(exp, results_root=tmp_path / "results", echo=lambda s: None)
    assert [o.status for o in result.outcomes] == ["ok"] * 6
    trace = load_trace(exp)
    for o in result.outcomes:
        d = result.exp_dir / o.rel_dir
        doc = run_json(d)
        assert doc["experiment"] == "s" and doc["engine"] == "sim-server"
        assert doc["point_name"] == o.rel_dir.split("/")[0]
        assert not pid_running(doc["server"]["pid"])
        assert doc["server"]["config_verified"] is True
        argv = doc["server"]["argv"]  # each repeat its own jitter seed, as in process
        assert argv[argv.index("--seed") + 1] == str(doc["repeat"])
        counters = orjson.loads((d / "counters.json").read_bytes())
        assert set(CANONICAL_COUNTERS) <= set(counters)
        # the server saw exactly the trace's work, once (deltas, not cumulative values)
        assert counters["prompt_tokens"] == trace.prompt_tokens
        assert counters["output_tokens"] == trace.output_tokens
        assert (
            counters["device_hit_tokens"]
            + counters["host_restore_tokens"]
            + counters["computed_prefill_tokens"]
            == counters["prompt_tokens"]
        )
        if doc["point"]["host_tier_gib"] == 0:
            assert counters["host_write_tokens"] == 0 and counters["host_restore_tokens"] == 0
        series = [orjson.loads(x) for x in (d / "metrics.jsonl").read_bytes().splitlines()]
        assert len(series) >= 2
        assert series[-1]["counters"]["prompt_tokens"] >= series[0]["counters"]["prompt_tokens"]
        assert "serving on http://127.0.0.1:" in (d / "server.log").read_text()
    df = pd.read_parquet(result.exp_dir / "summary.parquet")
    assert len(df) == 6 and set(df["host_tier_gib"]) == {0, 1, 4}
    assert set(df["status"]) == {"ok"} and (df["prompt_tokens"] == trace.prompt_tokens).all()
    assert (result.exp_dir / "summary.csv").exists()
    assert (result.exp_dir / "experiment.toml").read_text().startswith("\nname")
    predictions = orjson.loads((result.exp_dir / "predictions.json").read_bytes())
    (group,) = predictions["groups"]  # one group: the points differ only in the host tier
    assert group["points"] == [p.name for p in exp.points()]
    # a second sweep resumes: nothing reruns
    again = run_sweep(exp, results_root=tmp_path / "results", echo=lambda s: None)
    assert [o.status for o in again.outcomes] == ["skipped"] * 6


def test_server_killed_mid_run_is_recorded_and_the_sweep_goes_on(tmp_path):
    exp = make(tmp_path, name="k", tiers="[1]", gap_scale=0.05, calls=8)
    results = tmp_path / "results"
    box: dict = {}
    sweep = threading.Thread(
        target=lambda: box.update(r=run_sweep(exp, results_root=results, echo=lambda s: None))
    )
    sweep.start()
    killed = None
    try:
        deadline = time.monotonic() + 60
        while killed is None and time.monotonic() < deadline:
            started = list(results.glob("k/*/r*/metrics.jsonl"))  # scraping: the replay runs
            servers = sim_servers_of(os.getpid())
            if started and servers:
                killed = servers[0]
                os.kill(killed, signal.SIGKILL)
            time.sleep(0.05)
    finally:
        sweep.join(timeout=120)
    assert killed is not None and not sweep.is_alive()
    outcomes = box["r"].outcomes
    assert [o.status for o in outcomes] == ["failed", "ok"]
    doc = run_json(results / "k" / outcomes[0].rel_dir)
    assert doc["status"] == "failed" and doc["server"]["pid"] == killed
    assert doc["server"]["exit_code"] == -signal.SIGKILL
    assert "log_tail" in doc["server"] and doc["reason"]
    # its counters stop where /metrics stopped answering, and the run says so
    said = " ".join((doc.get("summary") or {}).get("warnings") or [])
    assert "the end scrape of /metrics failed" in said, said
    df = pd.read_parquet(results / "k" / "summary.parquet")
    assert sorted(df["status"]) == ["failed", "ok"]
    # no process of the sweep is left
    for o in outcomes:
        assert not pid_running(run_json(results / "k" / o.rel_dir)["server"]["pid"])
    assert sim_servers_of(os.getpid()) == []


def test_a_server_that_cannot_start_fails_its_run_only(tmp_path):
    exp = make(tmp_path, name="b", repeats=1, tiers="[0]", extra='extra_args = ["--no-such-flag"]')
    result = run_sweep(exp, results_root=tmp_path / "results", echo=lambda s: None)
    (o,) = result.outcomes
    assert o.status == "failed" and "no-such-flag" in o.reason
    doc = run_json(result.exp_dir / o.rel_dir)
    assert "no-such-flag" in doc["server"]["log_tail"]


@pytest.mark.slow
def test_interrupt_then_resume(tmp_path):
    exp = make(tmp_path, name="i", repeats=1, tiers="[0, 1, 4]", gap_scale=0.05, calls=8)
    results = tmp_path / "results"
    cmd = [sys.executable, "-m", "replay.cli.main", "sweep", exp.source, "--results", str(results)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if len(list(results.glob("i/*/r0/metrics.jsonl"))) >= 2:  # second run replaying
                break
            time.sleep(0.05)
        servers = sim_servers_of(proc.pid)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err.decode()
    assert servers and not any(pid_running(p) for p in servers)
    statuses = {d.parent.name: run_json(d)["status"] for d in results.glob("i/*/r0")}
    assert sorted(statuses.values()) == ["interrupted", "ok"]
    assert (results / "i" / "summary.parquet").exists()  # partial results readable

    # resume (in process: the CLI path was exercised above)
    again = run_sweep(exp, results_root=results, echo=lambda s: None)
    assert sorted(o.status for o in again.outcomes) == ["ok", "ok", "skipped"]
    statuses = [run_json(d)["status"] for d in results.glob("i/*/r0")]
    assert statuses == ["ok"] * 3


def test_a_run_past_its_time_limit_fails_and_the_server_is_stopped(tmp_path):
    """The replay itself stops at run_s: before, only the server was killed, and the driver
    retried the dead server for its whole server-gone grace (40 s here: the run took 56 s for a
    limit of 10, its calls in flight recorded as closed by the server)."""
    exp = make(tmp_path, name="t", repeats=1, tiers="[0]", gap_scale=0.2, calls=8)
    p = Path(exp.source)
    text = p.read_text().replace("stop_grace_s = 5", "stop_grace_s = 5\nrun_s = 1.0")
    p.write_text(text.replace("server_gone_grace_s = 0.5", "server_gone_grace_s = 40"))
    exp = load_experiment(p)
    result = run_sweep(exp, results_root=tmp_path / "results", echo=lambda s: None)
    (o,) = result.outcomes
    assert o.status == "failed" and "timeouts.run_s = 1 s" in o.reason
    doc = run_json(result.exp_dir / o.rel_dir)
    assert doc["status"] == "failed" and not pid_running(doc["server"]["pid"])
    summary = doc["summary"]
    assert summary["connection_retries"] == 0
    assert summary["makespan_s"] < 1.0 + 0.2 + 1.0  # run_s + the interrupt grace + slack
    rows = pd.read_parquet(result.exp_dir / o.rel_dir / "calls.parquet")
    assert "connection" not in set(rows["error_kind"].dropna())


@pytest.mark.slow
def test_a_server_left_by_a_sigkilled_sweep_is_stopped_by_the_next(tmp_path):
    exp = make(tmp_path, name="z", repeats=1, tiers="[1]", gap_scale=0.2, calls=8)
    results = tmp_path / "results"
    proc = sweep_process(exp, results, subprocess.DEVNULL)
    servers: list[int] = []
    try:
        servers = servers_once_replaying(proc, results, "z")
        proc.kill()  # SIGKILL: the sweep's finally blocks never run
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert servers, "no server seen"
    try:
        time.sleep(0.5)
        assert all(pid_running(p) for p in servers)  # orphaned, still serving
        (record,) = results.glob("z/*/r0/server.json")
        assert orjson.loads(record.read_bytes())["pgid"] == servers[0]
        doctor = CliRunner().invoke(cli, ["doctor", exp.source, "--results", str(results)])
        (warned,) = [x for x in doctor.output.splitlines() if x.startswith("WARN  leftover")]
        assert f"process group {servers[0]}" in warned and f"-{servers[0]}" in warned
        assert all(pid_running(p) for p in servers)  # doctor only names them
        lines: list[str] = []
        again = run_sweep(exp, results_root=results, echo=lines.append)
        assert not any(pid_running(p) for p in servers)
    finally:
        for pid in servers:  # whatever happened above, leave no orphan behind
            if pid_running(pid):
                os.killpg(pid, signal.SIGKILL)
    assert f"stopped server process group {servers[0]}" in lines[0]
    assert [o.status for o in again.outcomes] == ["ok"]
    assert not list(results.glob("z/*/r0/server.json"))  # stopped cleanly: record removed
    doctor = CliRunner().invoke(cli, ["doctor", exp.source, "--results", str(results)])
    assert "ok    leftover servers" in doctor.output


def test_dry_run_shows_the_ready_file_under_the_results_root_given(tmp_path):
    exp = make(tmp_path, repeats=1, tiers="[0]")
    root = tmp_path / "elsewhere"
    cp = subprocess.run(
        [sys.executable, "-m", "replay.cli.main", "sweep", exp.source, "--dry-run",
         "--results", str(root)],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert cp.returncode == 0, cp.stderr
    assert str(root / "s" / "host_tier_gib=0" / "r0" / ".server.port") in cp.stdout
    assert not root.exists()  # a dry run writes nothing


def test_an_experiment_setting_max_model_len_launches(tmp_path):
    """The adapter passes every simulator option to `replay sim serve`, max_model_len included,
    which the server did not take: every run failed with "No such option"."""
    exp = make(tmp_path, name="mml", repeats=1, tiers="[0]", extra="max_model_len = 65536")
    result = run_sweep(exp, results_root=tmp_path / "r", echo=lambda s: None)
    assert [o.status for o in result.outcomes] == ["ok"]


def test_a_fixed_port_already_listening_fails_the_run_before_the_launch(tmp_path, monkeypatch):
    """Something answers on the experiment's fixed port (a stale server of another sweep or
    user): the run measured it and was recorded `ok`. It now fails before anything is launched.
    The simulator's server announces a port of its own choosing; launched here on the given port
    instead, as engines without a ready file (vLLM, SGLang) are."""
    import dataclasses
    import socket

    from replay.engines import registry, sim_engines

    def on_given_port(options, host, port):
        return dataclasses.replace(
            sim_engines.launch_server(options, host, port), ready_file_flag=None
        )

    fixed = dataclasses.replace(sim_engines.SIM_SERVER, launch=on_given_port)
    monkeypatch.setitem(registry.ENGINES, "sim-server", fixed)

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        exp = make(tmp_path, repeats=1, tiers="[0]")
        path = Path(exp.source)
        path.write_text(path.read_text() + f"\n[server]\nport = {port}\n")
        exp = load_experiment(path)
        result = run_sweep(exp, results_root=tmp_path / "results", echo=lambda s: None)
    (outcome,) = result.outcomes
    assert outcome.status == "failed" and f"port {port} on 127.0.0.1 is already in use" in (
        outcome.reason or ""
    )
    assert sim_servers_of(os.getpid()) == []


def test_times_on_different_clocks_are_not_compared(tmp_path):
    """The in-process simulator's makespan is virtual seconds, the server's wall seconds (at
    time_scale 0, barely any): the report and `replay compare` say so instead of calling the
    difference real; token counts, on no clock, are compared as ever."""
    from replay.analysis.compare import DIFFERENT_CLOCKS, compare_sides
    from replay.analysis.load import load_results
    from replay.cli.compare_cmd import load_side
    from replay.report.analyse import analyse

    def mixed(text: str) -> str:  # time_scale is the server's option: in its own table
        text = text.replace("time_scale = 0.0\n", "").replace(
            "[matrix]", "[engine.sim-server]\ntime_scale = 0.0\n[matrix]"
        )
        return text.replace(
            "host_tier_gib = [1]", 'host_tier_gib = [1]\nengine = ["sim", "sim-server"]'
        )

    exp = make(tmp_path, name="mixed", repeats=2, tiers="[1]", calls=3, edit=mixed)
    result = run_sweep(exp, results_root=tmp_path / "r", echo=lambda s: None)
    assert [o.status for o in result.outcomes] == ["ok"] * 4
    res = load_results(result.exp_dir)
    assert set(zip(res.runs["engine"], res.runs["clock"], strict=True)) == {
        ("sim", "virtual"),
        ("sim-server", "wall"),
    }
    c = analyse(res).comparisons
    rows = c[c["factor"] == "engine"].set_index("metric")
    assert rows.loc["makespan_s", "verdict"] == DIFFERENT_CLOCKS
    assert rows.loc["computed_prefill_tokens", "verdict"] != DIFFERENT_CLOCKS
    a = load_side(str(result.exp_dir / "host_tier_gib=1,engine=sim"))
    b = load_side(str(result.exp_dir / "host_tier_gib=1,engine=sim-server"))
    sides = compare_sides(a, b).set_index("metric")
    assert sides.loc["makespan_s", "verdict"] == DIFFERENT_CLOCKS
    report = result.exp_dir / "report.md"
    r = subprocess.run([sys.executable, "-m", "replay.cli.main", "report", str(result.exp_dir)],
                       capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "cannot be compared (different clocks" in report.read_text()


@pytest.mark.slow
def test_a_second_ctrl_c_against_a_hung_server_ends_the_sweep_promptly(tmp_path):
    """A server that stops answering mid-run (SIGSTOPped here), then Ctrl-C twice: the second
    means "now". Before, the second was lost: the server's stop still waited its whole grace
    (15 s by default), the end scrape waited behind a periodic scrape stuck on the same server,
    and the recorder's stop waited for that scrape again; the run's reason said the replay had
    not finished although the driver had recorded its interrupted run."""
    exp = make(
        tmp_path,
        name="h",
        repeats=1,
        tiers="[0]",
        gap_scale=0.5,
        calls=8,
        edit=lambda t: t.replace("stop_grace_s = 5", "stop_grace_s = 30"),
    )
    results = tmp_path / "results"
    proc = sweep_process(exp, results)
    servers: list[int] = []
    try:
        servers = servers_once_replaying(proc, results, "h")
        assert servers
        time.sleep(0.5)  # a periodic scrape or two taken
        for pid in servers:
            os.kill(pid, signal.SIGSTOP)
        time.sleep(0.5)  # a periodic scrape now hangs on the stopped server
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=90)
        took_s = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in servers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 130, err.decode()
    assert not any(pid_running(p) for p in servers)
    (run_dir,) = results.glob("h/*/r0")
    doc = run_json(run_dir)
    assert doc["status"] == "interrupted"
    assert "before the replay finished" not in (doc["reason"] or "")
    # the end scrape's own timeout (5 s) is the one wait left; the stop grace (30 s) is cut
    assert took_s < 12, took_s
