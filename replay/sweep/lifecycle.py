"""One server process per run: start in its own process group, wait for health, stop by group.

The server's stdout and stderr go to `server.log`. Stopping sends SIGTERM to the whole group
(engines fork workers), waits `grace_s`, then SIGKILLs whatever of the group is left, so no
process of a sweep outlives its run, even when the server's main process died first.

A sweep that is itself SIGKILLed cannot stop its server; `server.json` in the run directory
records the process group while the server runs, and the next sweep stops what it finds there.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from replay.engines.base import LaunchSpec
from replay.errors import EngineError

__all__ = [
    "ServerProcess",
    "log_tail",
    "free_port",
    "group_alive",
    "SERVER_RECORD",
    "running_leftover_servers",
    "stop_leftover_servers",
    "stop_recorded_server",
    "per_run_env",
]

SERVER_RECORD = "server.json"
# Environment variables that name a folder each run's server must have to itself, empty: a
# multiprocess Prometheus directory shared between runs summed earlier runs' counters into this
# one's. Variable -> the folder's name in the run directory.
PER_RUN_FOLDERS = {"PROMETHEUS_MULTIPROC_DIR": "prometheus"}


def per_run_env(env: Mapping[str, str], run_dir: Path) -> dict[str, str]:
    """The run's own values for the `PER_RUN_FOLDERS` variables `env` sets (what the sweep
    launches with, and `--dry-run` shows)."""
    return {var: str(run_dir / name) for var, name in PER_RUN_FOLDERS.items() if var in env}


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS reports free right now (bound to port 0 and released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def check_port_free(host: str, port: int) -> None:
    """EngineError when something already listens on `host:port`: a server launched there could
    not bind, and the run would measure whatever answers (a stale server of another sweep or
    user, recorded `ok`)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        if s.connect_ex((host, port)) != 0:
            return
    raise EngineError(
        f"port {port} on {host} is already in use: a server launched there would not bind and "
        "the run would measure whatever answers; stop that process, or set [server] port = 0 "
        "(a free port each run)"
    )


def log_tail(path: Path, lines: int = 40, max_bytes: int = 64 * 1024) -> str:
    """The last `lines` lines of a log file ('' when it does not exist)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


def _group_from_proc(pgid: int) -> bool | None:
    """Whether /proc lists a live (non-zombie) process in group `pgid`; None without /proc."""
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # after the command: state, ppid, pgrp, ...
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


def group_alive(pgid: int) -> bool:
    """Whether any process of the group `pgid` still runs (zombies waiting to be reaped by an
    init that never reaps do not count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    listed = _group_from_proc(pgid)
    return True if listed is None else listed


class ServerProcess:
    """A launched server. Use as a context manager, or call `start()` and always `stop()`."""

    def __init__(
        self, spec: LaunchSpec, log_path: Path, host: str, port: int, *, cwd: str | None = None
    ):
        self.spec = spec
        self.log_path = log_path
        self.host = host
        self.port = port
        self.cwd = cwd
        self.proc: subprocess.Popen | None = None
        self.pgid: int | None = None
        self.ready_file = log_path.parent / ".server.port" if spec.ready_file_flag else None
        self.exit_code: int | None = None
        self.hurry = False  # set from a signal handler: `stop` SIGKILLs without its grace

    @property
    def argv(self) -> list[str]:
        """The exact argv started (the ready-file pair appended when the adapter asks for it)."""
        if self.spec.ready_file_flag and self.ready_file is not None:
            return [*self.spec.argv, self.spec.ready_file_flag, str(self.ready_file)]
        return list(self.spec.argv)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, extra_env: Mapping[str, str] | None = None) -> None:
        """Start the process in a new session (its own process group), log to `log_path`."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self.ready_file is not None:
            self.ready_file.unlink(missing_ok=True)
        env = {**os.environ, **self.spec.env, **(extra_env or {})}
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child holds it; we close our copy
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.cwd,
                start_new_session=True,
            )
        except OSError as e:
            raise EngineError(f"cannot start {self.argv[0]!r}: {e.strerror or e}") from None
        finally:
            log.close()
        self.pgid = self.proc.pid  # start_new_session: the child leads its own group
        self._write_record()

    def _write_record(self) -> None:
        """`server.json`: who to stop should this sweep die without stopping the server. The
        leader's start time tells a live server from an unrelated process that got its PID."""
        assert self.proc is not None
        doc = {
            "pid": self.proc.pid,
            "pgid": self.pgid,
            "host": socket.gethostname(),
            "start_ticks": _start_ticks(self.proc.pid),
            "argv0": self.argv[0],
        }
        with contextlib.suppress(OSError):  # best effort: the run itself does not depend on it
            (self.log_path.parent / SERVER_RECORD).write_text(json.dumps(doc) + "\n")

    def returncode(self) -> int | None:
        """Exit code of the main process, None while it runs (or before start)."""
        return self.proc.poll() if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _died(self, what: str) -> EngineError:
        code = self.proc.poll() if self.proc else None
        tail = log_tail(self.log_path, 20)
        if not tail.strip():  # killed before it wrote a line: say so, not an empty excerpt
            return EngineError(f"server {what} (exit code {code}); its log is empty")
        return EngineError(f"server {what} (exit code {code}); last lines of its log:\n{tail}")

    def wait_ready(self, timeout_s: float | None = None, poll_s: float = 0.1) -> None:
        """Wait for the port announcement (ready-file servers), then for `health_path` to answer
        2xx. Raises EngineError when the process exits first or `timeout_s` passes."""
        timeout_s = self.spec.ready_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        if self.ready_file is not None:
            while True:
                if not self.alive():
                    raise self._died("exited before announcing its port")
                text = self.ready_file.read_text().strip() if self.ready_file.exists() else ""
                if text.isdigit():
                    self.port = int(text)
                    break
                if time.monotonic() > deadline:
                    raise EngineError(f"server did not announce its port within {timeout_s:g} s")
                time.sleep(poll_s)
        # here, not at the top: a run stops a leftover server through this module (run_one) and
        # a simulator run never needs the HTTP client
        import httpx

        from replay.metrics.scrape import http_client

        url = self.base_url + self.spec.health_path
        with http_client(url, 5.0) as client:
            while True:
                if not self.alive():
                    raise self._died("exited before it was healthy")
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(url).status_code // 100 == 2:
                        return
                if time.monotonic() > deadline:
                    raise EngineError(f"server not healthy at {url} within {timeout_s:g} s")
                time.sleep(poll_s)

    def stop(self, grace_s: float = 15.0) -> int | None:
        """SIGTERM the group, wait up to `grace_s` for all of it, SIGKILL what is left; returns
        the exit code of the main process."""
        if self.proc is None or self.pgid is None:
            return None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and not self.hurry:
            # Workers may outlive their parent: wait for the whole group, not just the leader.
            if self.proc.poll() is not None and not group_alive(self.pgid):
                break
            time.sleep(0.02)
        if group_alive(self.pgid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pgid, signal.SIGKILL)
        self.exit_code = self.proc.wait()
        deadline = time.monotonic() + 5.0
        while group_alive(self.pgid) and time.monotonic() < deadline:
            time.sleep(0.02)  # SIGKILL is asynchronous
        if self.ready_file is not None:
            self.ready_file.unlink(missing_ok=True)
        if not group_alive(self.pgid):
            (self.log_path.parent / SERVER_RECORD).unlink(missing_ok=True)
        return self.exit_code

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _start_ticks(pid: int) -> int | None:
    """A process's start time in clock ticks since boot (/proc/PID/stat field 22); None without
    /proc or when the process is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _still_ours(doc: dict) -> int | None:
    """The recorded group's id when it is certainly still the recorded server's, else None. A live
    leader must have the recorded start time (else its PID was reused); with the leader gone, a
    live group is still the server's workers, since Linux never reuses a PID as a new process while
    a group of that id exists."""
    pid, pgid = doc.get("pid"), doc.get("pgid")
    if not isinstance(pid, int) or not isinstance(pgid, int) or pgid <= 1:
        return None
    if doc.get("host") != socket.gethostname():
        return None
    ticks = _start_ticks(pid)
    if ticks is not None:
        return pgid if ticks == doc.get("start_ticks") and pid == pgid else None
    return pgid if group_alive(pgid) else None


def _recorded_group(record: Path) -> tuple[dict, int | None]:
    """A `server.json` as read (empty when unreadable) and the process group it names when that
    group is certainly still the recorded server's (`_still_ours`)."""
    try:
        doc = json.loads(record.read_text())
    except (OSError, ValueError):
        return {}, None
    return (doc, _still_ours(doc)) if isinstance(doc, dict) else ({}, None)


def running_leftover_servers(exp_dir: Path) -> list[tuple[Path, int, str]]:
    """(run folder, process group, program) of each server an earlier sweep of `exp_dir`
    recorded that still runs, without stopping it (`replay doctor` reports them; only a sweep
    holding the lock may stop them, since a live sweep's own server has a record too)."""
    running = []
    for record in sorted(exp_dir.glob(f"*/r*/{SERVER_RECORD}")):
        doc, pgid = _recorded_group(record)
        if pgid is not None and group_alive(pgid):
            running.append((record.parent, pgid, str(doc.get("argv0") or "?")))
    return running


def stop_leftover_servers(exp_dir: Path, grace_s: float) -> list[int]:
    """Stop servers that an earlier sweep of `exp_dir` launched and could not stop (it was
    SIGKILLed): SIGTERM to each recorded group, SIGKILL after `grace_s`. Returns their group ids.
    Call with the sweep's lock held, so no live sweep's server is touched."""
    stopped = []
    for record in sorted(exp_dir.glob(f"*/r*/{SERVER_RECORD}")):
        pgid = stop_recorded_server(record.parent, grace_s)
        if pgid is not None:
            stopped.append(pgid)
    return stopped


def stop_recorded_server(run_dir: Path, grace_s: float) -> int | None:
    """Stop the server that `run_dir/server.json` records, if it is still that server; remove
    the record once nothing of it runs. Returns the group id it stopped (None: none running).
    A cluster task calls it for its own run when interrupted part way through stopping."""
    record = run_dir / SERVER_RECORD
    _, pgid = _recorded_group(record)
    stopped = None
    if pgid is not None and group_alive(pgid):
        _stop_group(pgid, grace_s)
        stopped = pgid
    if pgid is None or not group_alive(pgid):
        record.unlink(missing_ok=True)
    return stopped


def _stop_group(pgid: int, grace_s: float) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.02)
