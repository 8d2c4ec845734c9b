"""Server lifecycle with real subprocesses: own process group, health wait, stop by group, and
failures that carry the tail of the server's log."""

from __future__ import annotations

import os
import sys
import time

import pytest

from replay.engines.base import LaunchSpec
from replay.errors import EngineError
from replay.sweep.lifecycle import ServerProcess, free_port, group_alive

# A "server" that forks a worker (like engines do) and answers /health; it ignores SIGTERM when
# asked to, so the SIGKILL path is exercised too.
SERVER = r"""
import http.server, os, signal, sys, time
if sys.argv[2] == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = os.fork()
if child == 0:
    if sys.argv[2] == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(600)
    os._exit(0)
open(sys.argv[3], "w").write(str(child))
print("worker", child, flush=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is not a running process
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("mode", ["polite", "stubborn"])
def test_start_health_stop_kills_the_whole_group(tmp_path, mode):
    port = free_port()
    child_file = tmp_path / "child"
    spec = LaunchSpec(
        argv=[sys.executable, "-c", SERVER, str(port), mode, str(child_file)], ready_timeout_s=30
    )
    server = ServerProcess(spec, tmp_path / "server.log", "127.0.0.1", port)
    try:
        server.start()
        server.wait_ready()
        child = int(child_file.read_text())
        assert server.pgid == server.pid and os.getpgid(child) == server.pgid
        assert pid_alive(server.pid) and pid_alive(child)
    finally:
        t0 = time.monotonic()
        server.stop(grace_s=1.0)
    assert not pid_alive(server.pid) and not pid_alive(child)
    assert not group_alive(server.pgid)
    if mode == "stubborn":
        assert time.monotonic() - t0 >= 1.0  # waited the grace, then SIGKILL
        assert server.exit_code == -9


@pytest.mark.parametrize(
    "code, words",
    [
        (
            "print('bad flag --x'); sys.exit(3)",
            ["exit code 3", "last lines of its log:", "bad flag --x"],
        ),
        # killed before it wrote a line: said, not a reason ending with an empty excerpt
        ("sys.exit(4)", ["(exit code 4); its log is empty"]),
    ],
)
def test_a_server_that_exits_early_fails_with_its_log_tail(tmp_path, code, words):
    spec = LaunchSpec(argv=[sys.executable, "-c", f"import sys; {code}"], ready_timeout_s=30)
    server = ServerProcess(spec, tmp_path / "server.log", "127.0.0.1", free_port())
    try:
        server.start()
        with pytest.raises(EngineError) as e:
            server.wait_ready()
    finally:
        server.stop(1.0)
    assert all(w in str(e.value) for w in words), str(e.value)


def test_health_timeout_and_missing_binary(tmp_path):
    spec = LaunchSpec(argv=[sys.executable, "-c", "import time; time.sleep(60)"])
    server = ServerProcess(spec, tmp_path / "server.log", "127.0.0.1", free_port())
    try:
        server.start()
        with pytest.raises(EngineError, match="not healthy"):
            server.wait_ready(timeout_s=0.5)
    finally:
        server.stop(1.0)
    assert not pid_alive(server.pid)
    missing = ServerProcess(
        LaunchSpec(argv=["/nonexistent/engine"]), tmp_path / "s2.log", "127.0.0.1", 1
    )
    with pytest.raises(EngineError, match="cannot start"):
        missing.start()


def test_a_signal_while_stopping_kills_the_server_then_interrupts(tmp_path):
    """Ctrl-C (or SIGTERM, SIGHUP) while a stubborn server is being stopped: the stop SIGKILLs
    it at once instead of waiting out its grace, and the interrupt comes after the stop, so the
    run can be recorded. Before, the interrupt broke out of the stop and left the server running."""
    import signal
    import threading

    from replay.signals import interrupts_deferred

    port = free_port()
    child_file = tmp_path / "child"
    spec = LaunchSpec(
        argv=[sys.executable, "-c", SERVER, str(port), "stubborn", str(child_file)],
        ready_timeout_s=30,
    )
    server = ServerProcess(spec, tmp_path / "server.log", "127.0.0.1", port)
    server.start()
    server.wait_ready()
    child = int(child_file.read_text())
    after_stop: list[bool] = []

    def hurry() -> None:
        server.hurry = True

    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt), interrupts_deferred(on_signal=hurry):
        timer.start()
        server.stop(grace_s=30.0)
        after_stop.append(True)  # reached: the signal did not break out of the stop
    assert after_stop == [True] and time.monotonic() - t0 < 10  # not the 30 s grace
    assert not pid_alive(server.pid) and not pid_alive(child) and server.exit_code == -9


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_stop_a_sweep_as_ctrl_c(sig):
    import signal

    from replay.signals import sigterm_as_interrupt

    with pytest.raises(KeyboardInterrupt), sigterm_as_interrupt():
        signal.raise_signal(getattr(signal, sig))
        time.sleep(1)
    assert signal.getsignal(getattr(signal, sig)) is signal.SIG_DFL  # restored


def test_an_ignored_hangup_stays_ignored():
    """`nohup replay sweep ...`: SIGHUP ignored before the sweep stays ignored during it."""
    import signal

    from replay.signals import sigterm_as_interrupt

    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with sigterm_as_interrupt():
            signal.raise_signal(signal.SIGHUP)  # nothing happens
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_the_warm_up_is_bounded_by_the_runs_time(tmp_path):
    """A server that answers each warm-up request slowly (here 0.3 s; one hung after its health
    check: 600 s a request) stops the warm-up at the run's time limit, not after every request."""
    import http.server
    import json
    import threading

    from replay.sweep.control import warmup

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            time.sleep(0.3)
            body = json.dumps({"choices": [{"text": "x"}], "usage": {}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        t0 = time.monotonic()
        with pytest.raises(EngineError, match="warm-up took longer than timeouts.run_s = 0.5 s"):
            warmup(url, None, 50, timeout_s=5.0, total_s=0.5)
        assert time.monotonic() - t0 < 3.0  # not 50 x 0.3 s
        with pytest.raises(EngineError, match="control request failed: ReadTimeout"):
            warmup(url, None, 1, timeout_s=0.1)  # one request, past its own limit
    finally:
        server.shutdown()
        server.server_close()
