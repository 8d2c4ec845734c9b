"""Last-byte sync over real loopback: a long prompt's request is written but its last byte ahead of
its deadline, and its last byte at the deadline; the server notes when each request's head and
last byte arrived."""

from __future__ import annotations

import asyncio
import socket
import time
from dataclasses import dataclass, field

import numpy as np
import orjson
import pytest

from replay.driver import pacing
from replay.driver.http_common import HttpOptions
from replay.driver.http_raw import RawTransport
from replay.driver.options import RunOptions
from replay.driver.pool import RunControl, replay
from replay.protocol import CompletionRequest
from replay.trace.model import Call, Trace, TraceHeader
from tests.servers import FaultServer, _abort, _read_head
from tests.test_driver_cli import sim_server  # noqa: F401 - the fixture

LEAD_S = 0.2  # the staging lead in these tests: far above any loop lateness on a loaded machine


@dataclass
class Arrival:
    user: str
    prompt: list[int]
    t_head: float  # the request's head read (monotonic, the client's loop clock too)
    t_last: float  # its last byte read


@dataclass
class LastByteServer(FaultServer):
    """`FaultServer` that notes when each request's head and last byte arrived; it drops the
    connection right after the head of the POSTs numbered in `drop_after_head` (0-based)."""

    drop_after_head: set[int] = field(default_factory=set)
    arrivals: list[Arrival] = field(default_factory=list)
    posts: int = 0

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                method, path, headers = await _read_head(reader)
                t_head = time.monotonic()
                if method == "POST":
                    self.posts += 1
                    if self.posts - 1 in self.drop_after_head:
                        _abort(writer)
                        return
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if method == "POST":
                    req = orjson.loads(body)
                    self.arrivals.append(
                        Arrival(req["user"], req["prompt"], t_head, time.monotonic())
                    )
                if not await self._respond(method, path, body, writer):
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._writers.discard(writer)
            if not writer.is_closing():
                writer.close()


class Watched(RawTransport):
    """The raw transport, noting when each call was handed over for its send (its deadline: the
    call fired with its deadline's group, or `complete` for one sent by its own task), whether
    its connection had TCP_NODELAY (the last byte must not wait for an ACK), and which calls
    were fired."""

    def __init__(self, url: str, prewarm: int = 4) -> None:
        super().__init__(
            HttpOptions(url, model="m", limit=8, request_timeout_s=10, prewarm_connections=prewarm)
        )
        self.t_complete: dict[str, float] = {}
        self.nodelay: list[bool] = []
        self.fired: list[str] = []

    def _note(self, request: CompletionRequest) -> None:
        self.t_complete[request.task] = asyncio.get_running_loop().time()
        staged = self._staged.get((request.task, request.call))
        if staged is not None and not staged[0].lost:
            sock = staged[0].transport.get_extra_info("socket")  # type: ignore[union-attr]
            self.nodelay.append(bool(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)))

    def fire(self, request: CompletionRequest) -> bool:
        self._note(request)
        fired = super().fire(request)
        if fired:
            self.fired.append(request.task)
        return fired

    async def complete(self, request: CompletionRequest):
        if (request.task, request.call) not in self._fired:
            self._note(request)
        return await super().complete(request)


def _open_trace(prompt_tokens: list[int], at_s: list[float]) -> Trace:
    """Calls t0, t1, ... at `at_s` after a short first call ("first", at 0: arrival times count
    from the first)."""
    rng = np.random.default_rng(3)
    first = Call("first", 0, 0.0, 0, np.arange(10, dtype=np.int32), 10, 2, at_s=0.0)
    calls = [
        Call(f"t{i}", 0, 0.0, 0, rng.integers(0, 1000, n, dtype=np.int32), n, 2, at_s=at)
        for i, (n, at) in enumerate(zip(prompt_tokens, at_s, strict=True))
    ]
    return Trace(TraceHeader(vocab_size=1000), [first, *calls])


@pytest.fixture
def lead(monkeypatch):
    monkeypatch.setattr(pacing, "_STAGE_S", LEAD_S)


def _run(trace: Trace, srv: FaultServer, **opts) -> tuple[Watched, object]:
    transport = Watched(srv.url)
    result = asyncio.run(replay(trace, transport, RunOptions(pool=4, **opts)))
    return transport, result


def test_a_long_prompt_is_written_ahead_and_completed_by_its_last_byte_at_its_deadline(lead):
    trace = _open_trace([20_000, 20_000, 100], [0.5, 0.5, 0.5])
    with LastByteServer() as srv:
        transport, result = _run(trace, srv)
    assert result.status == "ok", result.reason
    got = {a.user: a for a in srv.arrivals}
    assert len(srv.arrivals) == 4  # each request read once
    for c in trace.calls:  # the exact bodies
        assert got[c.task].prompt == trace.prompt(c).tolist()
    for task in ("t0", "t1"):  # staged: the head came a lead early, the last byte at the send
        a = got[task]
        assert a.t_last - a.t_head >= LEAD_S / 2
        assert a.t_last >= transport.t_complete[task]
    short = got["t2"]  # a short prompt goes whole at its deadline
    assert short.t_head >= transport.t_complete["t2"]
    assert transport.nodelay == [True, True]
    assert not transport._staged


def test_a_call_already_due_when_built_is_sent_whole(lead):
    # closed loop, no gaps: each call is due as soon as the one before ends and its body is built
    rng = np.random.default_rng(4)
    calls, keep = [], 0
    for i in range(3):
        new = rng.integers(0, 1000, 20_000 if i == 0 else 10, dtype=np.int32)
        calls.append(Call("a", i, 0.0, keep, new, keep + len(new), 2))
        keep += len(new) + 2
    with LastByteServer() as srv:
        transport, result = _run(Trace(TraceHeader(vocab_size=1000), calls), srv)
    assert result.status == "ok", result.reason
    assert len(srv.arrivals) == 3
    assert transport.nodelay == []  # no call had a staged connection at its send
    assert transport.fired == []  # each sent by its own task, at once, not by a group's timer


def test_off_sends_every_request_whole_at_its_deadline(lead):
    trace = _open_trace([20_000, 20_000], [0.5, 0.5])
    with LastByteServer() as srv:
        transport, result = _run(trace, srv, last_byte_sync=False)
    assert result.status == "ok", result.reason
    for a in srv.arrivals:
        assert a.t_head >= transport.t_complete[a.user]
    assert transport.nodelay == []


def test_a_send_cap_turns_it_off(lead):
    trace = _open_trace([20_000, 20_000], [0.5, 0.5])
    with LastByteServer() as srv:
        transport, result = _run(trace, srv, max_inflight=2)
    assert result.status == "ok", result.reason
    assert all(a.t_head >= transport.t_complete[a.user] for a in srv.arrivals)


def test_a_connection_the_server_closed_while_staged_is_resent_whole_once(lead):
    trace = _open_trace([20_000], [0.5])
    with LastByteServer(drop_after_head={1}) as srv:
        transport, result = _run(trace, srv)
    assert result.status == "ok", result.reason
    assert [r["status"] for r in result.rows] == ["ok", "ok"]
    assert srv.posts == 3  # the first call; the staged head, then the resend
    (a,) = [a for a in srv.arrivals if a.user == "t0"]
    assert a.prompt == trace.prompt(trace.calls[1]).tolist()
    assert a.t_head >= transport.t_complete["t0"]  # the resend went whole, at the deadline


def test_a_run_stopped_while_a_request_is_staged_drops_its_connection(lead):
    async def main(srv: LastByteServer) -> object:
        transport = Watched(srv.url)
        control = RunControl()
        loop = asyncio.get_running_loop()
        # t1's head is written 1.8 s after the first call; stop at 1.9 s, before its last byte
        # (the pool's clock starts a little after this one: after the connections are opened)
        t0 = loop.time()
        loop.call_at(t0 + 1.9, control.stop)
        result = await replay(_open_trace([20_000, 20_000], [0.5, 2.0]), transport,
                              RunOptions(pool=2, interrupt_grace_s=1.0), control=control)  # fmt: skip
        return transport, result

    with LastByteServer() as srv:
        transport, result = asyncio.run(main(srv))
        deadline = time.monotonic() + 5
        while srv._writers and time.monotonic() < deadline:  # the server sees the close
            time.sleep(0.01)
        open_after = len(srv._writers)
    assert result.status == "interrupted"
    assert [a.user for a in srv.arrivals] == ["first", "t0"]  # t1 never completed
    assert srv.posts == 3
    assert open_after == 0 and not transport._staged


def test_the_simulator_server_answers_staged_requests(lead, sim_server):  # noqa: F811
    trace = _open_trace([4_096, 3_000, 100], [0.3, 0.3, 0.4])
    transport = RawTransport(HttpOptions(sim_server, request_timeout_s=30, prewarm_connections=3))
    result = asyncio.run(replay(trace, transport, RunOptions(pool=3)))
    assert result.status == "ok", result.reason
    assert sorted(r["prompt_tokens"] for r in result.rows) == [10, 100, 3_000, 4_096]
    assert all(r["prompt_tokens_reported"] == r["prompt_tokens"] for r in result.rows)
    assert all(r["status"] == "ok" for r in result.rows)


@pytest.mark.parametrize(("env", "on"), [(None, True), ("off", False), ("0", False), ("on", True)])
def test_the_environment_turns_it_off(monkeypatch, env, on):
    if env is None:
        monkeypatch.delenv("REPLAY_LAST_BYTE_SYNC", raising=False)
    else:
        monkeypatch.setenv("REPLAY_LAST_BYTE_SYNC", env)
    opts = RunOptions(pool=1)
    assert opts.last_byte_sync is on and opts.config_dict()["last_byte_sync"] is on
