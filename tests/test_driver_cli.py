"""`replay run` as a user runs it: a real subprocess against real loopback servers."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pandas as pd
import pytest

from replay.trace.io import write_trace
from replay.trace.synth import synth
from tests.servers import FaultServer, make_trace

ROOT = Path(__file__).resolve().parents[1]
REPLAY = [sys.executable, "-m", "replay.cli.main"]


def _replay(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*REPLAY, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("trace") / "t.jsonl.gz"
    write_trace(synth("claude-code", tasks=4, seed=2, scale=0.01, max_calls_per_task=5), path)
    return path


def test_run_against_an_openai_server_writes_the_run_directory(trace_file, tmp_path):
    out = tmp_path / "run"
    with FaultServer(model="served-x") as srv:
        cp = _replay(
            "run", "--trace", str(trace_file), "--pool", "2", "--out", str(out),
            "--url", srv.url, "--gap-scale", "0.001", "--json",
        )  # fmt: skip
    assert cp.returncode == 0, cp.stderr
    summary = orjson.loads(cp.stdout)
    for key in ("makespan_s", "calls", "errors", "prompt_tokens", "output_tokens",
                "cached_tokens", "ttft_p50_s", "jct_p90_s", "drift_p99_s",
                "host_restore_tokens", "prompt_mismatches"):  # fmt: skip
        assert key in summary
    assert summary["status"] == "ok" and summary["errors"] == 0
    assert summary["calls"] == len(srv.seen) == summary["calls_total"]
    assert summary["host_restore_tokens"] is None  # unknown is null, never 0
    assert {s.body["model"] for s in srv.seen} == {"served-x"}  # from /v1/models
    run = orjson.loads((out / "run.json").read_bytes())
    assert run["provenance"]["served_model"] == "served-x"
    assert len(run["provenance"]["trace_sha256"]) == 64
    assert len(pd.read_parquet(out / "calls.parquet")) == summary["calls"]


def test_run_on_the_simulator_in_virtual_time(trace_file, tmp_path):
    cp = _replay(
        "run", "--trace", str(trace_file), "--pool", "2", "--out", str(tmp_path),
        "--engine", "sim", "--device-kv-gib", "2", "--json",
    )  # fmt: skip
    assert cp.returncode == 0, cp.stderr
    summary = orjson.loads(cp.stdout)
    assert summary["status"] == "ok" and summary["device_hit_tokens"] is not None
    assert (tmp_path / "counters.json").exists()


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--pool", "2"], "exactly one of --url"),
        (["--pool", "0", "--url", "http://127.0.0.1:9"], "pool"),
        (["--pool", "2", "--url", "ftp://x"], "--url"),
        (["--pool", "2", "--url", "http://127.0.0.1:9", "--host-tier-gib", "4"], "--engine sim"),
    ],
)
def test_bad_input_exits_2_with_one_line(trace_file, tmp_path, args, needle, capsys):
    code, err = _main_in_process(
        ["run", "--trace", str(trace_file), "--out", str(tmp_path), *args], capsys
    )
    assert code == 2
    assert needle in err and err.startswith("replay: ") and err.count("\n") == 1


def test_missing_trace_exits_2(tmp_path, capsys):
    code, err = _main_in_process(
        ["run", "--trace", str(tmp_path / "nope.jsonl"), "--pool", "1",
         "--out", str(tmp_path), "--url", "http://127.0.0.1:9"], capsys,
    )  # fmt: skip
    assert code == 2 and "nope.jsonl" in err and "Traceback" not in err


def _main_in_process(argv: list[str], capsys) -> tuple[int, str]:
    """The real CLI entry point in this process (bad input never reaches the network)."""
    from replay.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(argv)
    return int(e.value.code or 0), capsys.readouterr().err


def test_no_server_at_the_url_is_refused_before_anything_is_written(tmp_path):
    """Nothing listening: a one-line error naming --url, exit 2, no run directory. Before, the
    run started, warned that /v1/models gave no model id, and failed with an empty summary.
    (A server that goes away during the run: tests/test_driver_http.py, `refused`.)"""
    trace = tmp_path / "t.jsonl"
    write_trace(make_trace({"a": [{}, {}]}), trace)
    from tests.servers import free_port

    port = free_port()
    cp = _replay("run", "--trace", str(trace), "--pool", "1", "--out", str(tmp_path / "o"),
                 "--url", f"http://127.0.0.1:{port}", "--server-gone-grace-s", "0.3")  # fmt: skip
    assert cp.returncode == 2, cp.stderr
    assert cp.stderr.startswith(f"replay: run: --url: nothing listens at http://127.0.0.1:{port}")
    assert "model id" not in cp.stderr and not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("https://{hostport}", "no server at https://{hostport} ("),  # TLS to a plain port
        ("http://{hostport}/foo", "no /v1/models at http://{hostport}/foo (HTTP 404)"),
    ],
)
def test_a_url_no_call_could_reach_is_refused_before_anything_is_written(
    tmp_path, sim_server, url, words
):
    """Every call failed, the run waited out every gap of the trace and exited 0 with a warning
    about model ids: the start-up GET refused only a refused connection."""
    trace = tmp_path / "t.jsonl"
    write_trace(make_trace({"a": [{}, {}]}), trace)
    hostport = sim_server.removeprefix("http://")
    cp = _replay("run", "--trace", str(trace), "--pool", "1", "--out", str(tmp_path / "o"),
                 "--url", url.format(hostport=hostport))  # fmt: skip
    assert cp.returncode == 2, cp.stderr
    assert cp.stderr.startswith("replay: run: --url: " + words.format(hostport=hostport))
    assert len(cp.stderr.strip().splitlines()) == 1 and not (tmp_path / "o").exists()


@pytest.mark.parametrize("every", [1, 2])
def test_a_server_that_stops_answering_fails_the_run_in_bounded_time(tmp_path, every):
    """Every call hangs (every=1): the run fails once nothing has been answered for the request
    timeout plus the server-gone grace, instead of taking each of the 40 calls to its timeout.
    Every other call hangs (every=2): the answers in between keep the run going to its end."""
    trace = tmp_path / "t.jsonl"
    write_trace(make_trace({t: [{}] * 20 for t in ("a", "b")}), trace)
    hangs = {(t, i): "hang" for t in ("a", "b") for i in range(20) if i % every == 0}
    with FaultServer(faults=hangs) as srv:
        cp = _replay("run", "--trace", str(trace), "--pool", "2", "--out", str(tmp_path / "o"),
                     "--url", f"http://127.0.0.1:{srv.port}", "--request-timeout-s", "0.3",
                     "--server-gone-grace-s", "0.5", "--quiet")  # fmt: skip
    run = orjson.loads((tmp_path / "o" / "run.json").read_bytes())
    rows = pd.read_parquet(tmp_path / "o" / "calls.parquet")
    if every == 1:
        assert cp.returncode == 1, cp.stderr
        assert run["status"] == "failed" and "server not answering" in run["reason"]
        # stopped early: without the rule, all 40 calls ran to their timeouts
        assert len(rows) < 20 and set(rows["error_kind"]) <= {"timeout", "cancelled"}
    else:
        assert cp.returncode == 0, cp.stderr
        assert run["status"] == "errors" and len(rows) == 40
        assert (rows["error_kind"] == "timeout").sum() == 20


def test_a_silent_server_fails_the_run_when_the_silence_is_due(tmp_path):
    """The silence was only looked at when a call timed out: with each task's next call sent
    after its timeout, the run failed up to one request timeout late (15 s of silence for a
    limit of 10). It is looked at again when the silence is due."""
    import re

    trace = tmp_path / "t.jsonl"
    write_trace(make_trace({t: [{}] * 20 for t in ("a", "b")}), trace)
    hangs = {(t, i): "hang" for t in ("a", "b") for i in range(20)}
    with FaultServer(faults=hangs) as srv:
        cp = _replay("run", "--trace", str(trace), "--pool", "2", "--out", str(tmp_path / "o"),
                     "--url", f"http://127.0.0.1:{srv.port}", "--request-timeout-s", "3",
                     "--server-gone-grace-s", "1", "--quiet")  # fmt: skip
    assert cp.returncode == 1, cp.stderr
    reason = orjson.loads((tmp_path / "o" / "run.json").read_bytes())["reason"]
    silent_s = float(re.search(r"no response for ([0-9.]+) s", reason).group(1))
    assert 4 <= silent_s < 5.5, reason  # the limit is 3 + 1 s; the next timeouts came at 6 s


def test_one_timeout_after_a_long_gap_is_an_error_not_a_silent_server(tmp_path):
    """The agent's own gap counted as the server's silence: one call timing out after a gap
    longer than the request timeout plus the grace failed a healthy run as 'server not
    answering'. Only time with a call in flight counts now."""
    trace = tmp_path / "t.jsonl"
    write_trace(make_trace({"a": [{}, {"gap": 1.5}, {}]}), trace)
    with FaultServer(faults={("a", 1): "hang"}) as srv:
        cp = _replay("run", "--trace", str(trace), "--pool", "1", "--out", str(tmp_path / "o"),
                     "--url", f"http://127.0.0.1:{srv.port}", "--request-timeout-s", "0.3",
                     "--server-gone-grace-s", "0.5", "--quiet")  # fmt: skip
    assert cp.returncode == 0, cp.stderr
    run = orjson.loads((tmp_path / "o" / "run.json").read_bytes())
    rows = pd.read_parquet(tmp_path / "o" / "calls.parquet")
    assert run["status"] == "errors" and len(rows) == 3
    kinds = rows.sort_values("call")["error_kind"].fillna("-").tolist()
    assert kinds == ["-", "timeout", "-"]


@contextlib.contextmanager
def _running_until_seen(srv: FaultServer, calls: int, run_args: list[str], preexec=None):
    """`replay run` with `run_args` as a subprocess, handed over once `srv` has seen `calls`
    requests (or after 30 s); killed on the way out if it is still running."""
    proc = subprocess.Popen(
        [*REPLAY, "run", *run_args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=preexec,
    )
    try:
        deadline = time.monotonic() + 30
        while len(srv.seen) < calls and time.monotonic() < deadline:
            time.sleep(0.05)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_stops_sending_flushes_records_and_exits_130(tmp_path, sig):
    trace = tmp_path / "t.jsonl"
    write_trace(make_trace({f"t{i}": [{"gap": 0.05}] * 50 for i in range(4)}), trace)
    out = tmp_path / "o"
    with FaultServer(ttft_s=0.05, decode_s=0.05) as srv:
        argv = ["--trace", str(trace), "--pool", "4", "--out", str(out), "--url", srv.url, "--json"]
        with _running_until_seen(srv, 8, argv) as proc:
            proc.send_signal(sig)
            stdout, stderr = proc.communicate(timeout=30)
        sent_at_stop = len(srv.seen)
    assert proc.returncode == 130, stderr
    run = orjson.loads((out / "run.json").read_bytes())
    assert run["status"] == "interrupted"
    rows = pd.read_parquet(out / "calls.parquet")
    assert 8 <= len(rows) <= sent_at_stop < 200
    assert orjson.loads(stdout)["status"] == "interrupted"
    assert os.path.getsize(out / "calls.jsonl") > 0


@pytest.fixture
def sim_server(tmp_path):
    """`replay sim serve` on port 0 as a subprocess; its URL once it listens; always stopped."""
    ready = tmp_path / "port"
    proc = subprocess.Popen(
        [
            *REPLAY,
            "sim",
            "serve",
            "--port",
            "0",
            "--ready-file",
            str(ready),
            "--time-scale",
            "0.001",
            "--device-kv-gib",
            "2",
        ],  # fmt: skip
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not (ready.exists() and ready.read_text().strip()):
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "sim server did not start"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{int(ready.read_text())}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_run_against_the_simulator_server_over_loopback(trace_file, tmp_path, sim_server):
    cp = _replay(
        "run", "--trace", str(trace_file), "--pool", "2", "--out", str(tmp_path / "o"),
        "--url", sim_server, "--engine-kind", "sim-server", "--gap-scale", "0.001", "--json",
    )  # fmt: skip
    assert cp.returncode == 0, cp.stderr
    summary = orjson.loads(cp.stdout)
    assert summary["status"] == "ok" and summary["errors"] == 0
    assert summary["prompt_mismatches"] == summary["completion_mismatches"] == 0
    assert summary["calls"] == summary["calls_total"]
    assert summary["cached_tokens"] is not None and summary["cached_tokens"] > 0
    rows = pd.read_parquet(tmp_path / "o" / "calls.parquet")
    assert (rows["t_first_token"] >= rows["t_send"]).all()
    # the adapter asks for the output's ids: streamed tokens are counted and forcing is checked
    assert summary["exact_match_rate"] == 1.0
    assert (rows["stream_tokens"] == rows["completion_tokens"]).all()
    # the simulator's own counters come through /metrics as they do in process; gauges do not
    counters = orjson.loads((tmp_path / "o" / "counters.json").read_bytes())
    assert counters["requests"] == summary["calls"] and counters["chunks_written"] >= 0
    assert isinstance(counters["device_evicted_blocks"], int)
    assert not {"device_blocks", "host_chunks", "device_blocks_capacity"} & set(counters)


def test_a_call_recorded_with_no_output_asks_a_vllm_like_server_for_one_token(tmp_path, sim_server):
    """vLLM refuses max_tokens 0 and so does the sim server; the WEKA set has two such calls.
    Over HTTP the call asks for 1 (its row says so) and the run is clean; in process the
    simulator takes 0 as a prefill-only request."""
    trace = tmp_path / "t.jsonl"
    write_trace(make_trace({"a": [{"out": 3}, {"out": 0}, {"out": 2}]}), trace)
    rows = {}
    for where, args in (
        ("http", ("--url", sim_server, "--engine-kind", "sim-server")),
        ("sim", ("--engine", "sim")),
    ):
        cp = _replay(
            "run", "--trace", str(trace), "--pool", "1", "--out", str(tmp_path / where),
            "--gap-scale", "0", "--strict", "--json", *args,
        )  # fmt: skip
        assert cp.returncode == 0, cp.stderr
        summary = orjson.loads(cp.stdout)
        assert summary["status"] == "ok" and summary["errors"] == 0, summary
        rows[where] = pd.read_parquet(tmp_path / where / "calls.parquet").sort_values("call")
    assert rows["http"]["max_tokens"].tolist() == [3, 1, 2]
    assert rows["http"]["completion_tokens"].tolist() == [3, 1, 2]
    assert rows["sim"]["max_tokens"].tolist() == [3, 0, 2]
    # the extra token enters no context: the third prompt is the trace's, sent whole
    assert rows["http"]["prompt_tokens"].tolist() == rows["sim"]["prompt_tokens"].tolist()


def test_a_run_started_with_sigint_ignored_keeps_ignoring_it(tmp_path):
    """As `cmd &` from a script starts it: Python then leaves SIGINT ignored, and so must the
    replay (it took the signal over and stopped the run)."""
    trace = tmp_path / "t.jsonl"
    write_trace(make_trace({f"t{i}": [{"gap": 0.02}] * 10 for i in range(4)}), trace)
    out = tmp_path / "o"
    with FaultServer(ttft_s=0.01) as srv:
        argv = ["--trace", str(trace), "--pool", "4", "--out", str(out), "--url", srv.url]
        ignore = lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)  # noqa: E731
        with _running_until_seen(srv, 8, argv, preexec=ignore) as proc:
            proc.send_signal(signal.SIGINT)
            _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert orjson.loads((out / "run.json").read_bytes())["status"] == "ok"
    assert len(pd.read_parquet(out / "calls.parquet")) == 40


@pytest.mark.parametrize("hard", [4096, 200])
def test_the_open_file_limit_is_raised_for_a_large_pool_or_named(tmp_path, hard):
    """Started with a soft limit of 200 open files (hard 4096): the run raises it and its 300
    agents all connect. With the hard limit at 200 too, it says so before sending."""
    import resource

    trace = tmp_path / "t.jsonl"
    write_trace(make_trace({f"t{i}": [{}] * 2 for i in range(300)}), trace)
    out = tmp_path / "o"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (200, hard))

    with FaultServer() as srv:
        cp = subprocess.run(
            [*REPLAY, "run", "--trace", str(trace), "--pool", "300", "--out", str(out),
             "--url", srv.url, "--quiet"],
            cwd=ROOT, capture_output=True, text=True, timeout=120, preexec_fn=limit,
        )  # fmt: skip
    rows = pd.read_parquet(out / "calls.parquet")
    if hard == 4096:
        assert cp.returncode == 0 and (rows["status"] == "ok").all(), cp.stderr
        assert "open-file limit" not in cp.stderr
    else:
        assert "replay: warning: the open-file limit is 200 (hard limit 200)" in cp.stderr


def test_an_open_loop_trace_says_the_pool_does_not_limit_it(tmp_path):
    trace = tmp_path / "t.jsonl"
    write_trace(make_trace({f"t{i}": [{"at": 0.01 * i}] for i in range(6)}), trace)
    argv = ["run", "--trace", str(trace), "--pool", "2", "--engine", "sim", "--quiet"]
    cp = _replay(*argv, "--out", str(tmp_path / "o"))
    assert cp.returncode == 0, cp.stderr
    assert "open-loop trace" in cp.stderr and "--pool 2 does not limit them" in cp.stderr
    cp = _replay(*argv, "--out", str(tmp_path / "o2"), "--max-inflight", "2")
    assert cp.returncode == 0 and "open-loop" not in cp.stderr


def test_a_real_time_run_notes_a_recorded_wait_of_hours():
    from replay.cli.run_cmd import _long_wait_note

    trace = make_trace({"a": [{}, {"gap": 7200.0}, {"gap": 1800.0}], "b": [{}, {"gap": 5.0}]})
    note = _long_wait_note(trace, 1.0)
    assert note is not None and "a call 1 waits 2.0 h" in note and "add up to 2.5 h" in note
    assert _long_wait_note(trace, 0.1) is None  # 12 minutes: no note


def test_second_signal_cancels_calls_in_flight_at_once(tmp_path):
    trace = tmp_path / "t.jsonl"
    write_trace(make_trace({f"t{i}": [{}] * 3 for i in range(3)}), trace)
    out = tmp_path / "o"
    with FaultServer(ttft_s=60.0) as srv:  # every call hangs far beyond the 5 s grace
        argv = ["--trace", str(trace), "--pool", "3", "--out", str(out), "--url", srv.url]
        with _running_until_seen(srv, 3, argv) as proc:
            proc.send_signal(signal.SIGINT)
            time.sleep(0.3)
            t_second = time.monotonic()
            proc.send_signal(signal.SIGINT)
            _, stderr = proc.communicate(timeout=30)
            took_s = time.monotonic() - t_second
    assert proc.returncode == 130, stderr
    assert took_s < 4.0  # well inside the 5 s grace the first signal gave
    rows = pd.read_parquet(out / "calls.parquet")
    assert len(rows) == 3 and set(rows["error_kind"]) == {"cancelled"}
    assert orjson.loads((out / "run.json").read_bytes())["status"] == "interrupted"


def test_bad_simulator_options_leave_no_run_directory(tmp_path, capsys):
    """An unknown preset is refused before --out is made (it left an empty directory)."""
    trace = tmp_path / "t.jsonl"
    write_trace(make_trace({"a": [{}]}), trace)
    code, err = _main_in_process(
        ["run", "--trace", str(trace), "--pool", "1", "--out", str(tmp_path / "o"),
         "--engine", "sim", "--hardware", "h30"], capsys,
    )  # fmt: skip
    assert code == 2 and "unknown hardware 'h30'" in err
    assert not (tmp_path / "o").exists()


def test_a_run_whose_every_call_failed_exits_1_and_a_wrong_kind_is_said(
    trace_file, tmp_path, sim_server
):
    """A wrong --served-model: the simulator's server answers every call 404 (as vLLM does);
    the run measured nothing, so it exits 1 as a sweep does, with its files readable. A wrong
    --engine-kind gets a warning naming the kind the server's metrics are."""
    url = sim_server
    out = tmp_path / "run"
    cp = _replay(
        "run", "--trace", str(trace_file), "--pool", "2", "--out", str(out), "--url", url,
        "--served-model", "not-served", "--gap-scale", "0", "--json",
    )  # fmt: skip
    assert cp.returncode == 1, cp.stderr
    assert "every call failed" in cp.stderr
    summary = orjson.loads(cp.stdout)
    assert summary["status"] == "errors" and summary["errors"] == summary["calls"] > 0
    assert orjson.loads((out / "run.json").read_bytes())["status"] == "errors"
    ok = tmp_path / "ok"
    cp = _replay(
        "run", "--trace", str(trace_file), "--pool", "2", "--out", str(ok), "--url", url,
        "--gap-scale", "0",
    )  # fmt: skip
    assert cp.returncode == 0, cp.stderr
    assert "warning" not in cp.stderr
    # an --engine-kind whose metrics the server does not have: said, not all-null in silence
    wrong = tmp_path / "wrong"
    cp = _replay(
        "run", "--trace", str(trace_file), "--pool", "2", "--out", str(wrong), "--url", url,
        "--engine-kind", "vllm", "--gap-scale", "0",
    )  # fmt: skip
    assert cp.returncode == 0, cp.stderr
    assert "has sim-server's metrics, not vllm's" in cp.stderr
    warned = orjson.loads((wrong / "run.json").read_bytes())["summary"]["warnings"]
    assert any("--engine-kind sim-server" in w for w in warned), warned


def test_a_second_run_on_the_same_out_is_refused_while_the_first_runs(trace_file, tmp_path):
    """Two runs on one --out wrote each (task, call) twice into calls.jsonl, and both exited 0;
    --force cleared a running run's folder. A run now holds a lock on its --out."""
    out = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pathlib import Path;"
         "from replay.sweep.results import exclusive_lock\n"
         "with exclusive_lock(Path(sys.argv[1]), what='run'):\n"
         " print('held', flush=True); time.sleep(60)", str(out)],
        cwd=ROOT, stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        for extra in ((), ("--force",)):
            cp = _replay(
                "run", "--trace", str(trace_file), "--pool", "2", "--out", str(out),
                "--engine", "sim", *extra,
            )  # fmt: skip
            assert cp.returncode == 2, cp.stderr
            assert f"another run (pid {holder.pid}" in cp.stderr and "Traceback" not in cp.stderr
        assert [p.name for p in out.iterdir()] == [".lock"]  # nothing written, nothing cleared
    finally:
        holder.kill()
        holder.wait()
    # the holder is gone (killed: the kernel let go of its lock): the folder is a run's again
    cp = _replay(
        "run", "--trace", str(trace_file), "--pool", "2", "--out", str(out), "--engine", "sim"
    )
    assert cp.returncode == 0, cp.stderr
    assert (out / "run.json").is_file()
    cp = _replay(
        "run", "--trace", str(trace_file), "--pool", "2", "--out", str(out), "--engine", "sim"
    )
    assert cp.returncode == 2 and "not empty" in cp.stderr and ".lock" not in cp.stderr
    cp = _replay(
        "run", "--trace", str(trace_file), "--pool", "2", "--out", str(out), "--engine", "sim",
        "--force",
    )  # fmt: skip
    assert cp.returncode == 0, cp.stderr
    # a path a run may not write gets no lock file
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "notes.txt").write_text("mine")
    cp = _replay(
        "run",
        "--trace",
        str(trace_file),
        "--pool",
        "2",
        "--out",
        str(stray),
        "--engine",
        "sim",
        "--force",
    )
    assert cp.returncode == 2 and sorted(p.name for p in stray.iterdir()) == ["notes.txt"]
