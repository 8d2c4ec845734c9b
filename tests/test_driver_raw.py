"""The raw transport's connection handling over real loopback sockets: response framing split at
awkward byte boundaries, connections the server closes or resets, `Connection: close`, the pool
limit as the server counts it, timeouts while waiting for a connection, cancellation, TLS.

The faults every transport shares (HTTP errors, hangs, resets, cut and malformed streams) run in
tests/test_driver_http.py, parametrized over all transports."""

from __future__ import annotations

import asyncio
import random
import shutil
import ssl
import subprocess
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.driver.http_common import HttpOptions
from replay.driver.http_raw import RawTransport
from replay.driver.http_raw_conn import _rest
from replay.errors import RequestFailed
from replay.protocol import CompletionRequest
from tests.servers import ScriptServer, sse_body

PROMPT = np.arange(50, dtype=np.int32)


def _req(call: int = 0, task: str = "a") -> CompletionRequest:
    return CompletionRequest(task, call, PROMPT, 3)


def _response(framing: str, payload: bytes, *, ctype: bytes = b"text/event-stream") -> bytes:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: " + ctype + b"\r\n"
    if framing == "length":
        return head + b"content-length: %d\r\n\r\n" % len(payload) + payload
    if framing == "close":  # no length: the body ends when the server closes
        return head + b"connection: close\r\n\r\n" + payload
    chunks = [payload[i : i + 7] for i in range(0, len(payload), 7)]
    body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    return head + b"transfer-encoding: chunked\r\n\r\n" + body


async def _with(url: str, body, **http):
    """Run `body(transport)` with a started raw transport; always closed."""
    t = RawTransport(HttpOptions(url, model="m", **http))
    await t.start()
    try:
        return await body(t)
    finally:
        await t.close()


def _cuts(n: int, how: str) -> list[int]:
    if how == "every_byte":
        return list(range(1, n))
    rng = random.Random(how)
    return sorted(rng.sample(range(1, n), min(n - 1, 25)))


@pytest.mark.parametrize("framing", ["chunked", "length", "close"])
@pytest.mark.parametrize("how", ["every_byte", "seed-1", "seed-2"])
def test_response_split_at_any_byte_parses_the_same(framing, how):
    raw = _response(framing, sse_body(50, 3))
    cuts = [0, *_cuts(len(raw), how), len(raw)]

    async def script(ex) -> bool:
        for a, b in zip(cuts, cuts[1:], strict=False):
            ex.writer.write(raw[a:b])
            await ex.writer.drain()
            await asyncio.sleep(0.0005)  # separate segments: the client reads each on its own
        return framing != "close"

    with ScriptServer(script) as srv:
        res = asyncio.run(_with(srv.url, lambda t: t.complete(_req())))
    assert (res.prompt_tokens, res.completion_tokens) == (50, 3)
    assert res.t_first_token is not None and res.t_first_token <= res.t_end


async def _until(cond, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


def test_idle_connection_closed_by_the_server_is_not_reused():
    """The server closes after each response without saying so; once the client has seen the
    close, the next request goes out on a fresh connection and succeeds."""

    async def script(ex) -> bool:
        ex.writer.write(_response("length", sse_body(50, 3)))
        return False

    async def body(t):
        first = await t.complete(_req(0))
        await _until(lambda: t._pool.open_connections == 0)
        second = await t.complete(_req(1))
        return first, second

    with ScriptServer(script) as srv:
        first, second = asyncio.run(_with(srv.url, body))
    assert first.completion_tokens == second.completion_tokens == 3
    assert "stale_connection_retries" not in second.extra
    assert srv.opened == 2 and [e.on_conn for e in srv.exchanges] == [0, 0]


def test_connection_close_response_retires_the_connection():
    """`Connection: close` retires the connection even when the server leaves it open."""

    async def script(ex) -> bool:
        payload = sse_body(50, 3)
        ex.writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(payload), payload)
        )
        return True  # keep reading: only the client's close ends the connection

    async def body(t):
        return [await t.complete(_req(i)) for i in range(3)]

    with ScriptServer(script) as srv:
        results = asyncio.run(_with(srv.url, body))
    assert [r.completion_tokens for r in results] == [3, 3, 3]
    assert srv.opened == 3 and all(e.on_conn == 0 for e in srv.exchanges)


def test_keep_alive_connection_is_reused():
    async def script(ex) -> bool:
        ex.writer.write(_response("chunked", sse_body(50, 3)))
        return True

    async def body(t):
        return [await t.complete(_req(i)) for i in range(4)]

    with ScriptServer(script) as srv:
        asyncio.run(_with(srv.url, body))
    assert srv.opened == 1 and [e.on_conn for e in srv.exchanges] == [0, 1, 2, 3]


@pytest.mark.parametrize("prewarm", [0, 4])
def test_pool_never_opens_more_than_limit_connections(prewarm):
    async def script(ex) -> bool:
        if ex.method == "POST":
            await asyncio.sleep(0.02)
            ex.writer.write(_response("length", sse_body(50, 3)))
        else:
            ex.writer.write(_response("length", b'{"data": []}', ctype=b"application/json"))
        return True

    async def body(t):
        return await asyncio.gather(*(t.complete(_req(i, f"t{i}")) for i in range(24)))

    with ScriptServer(script) as srv:
        results = asyncio.run(_with(srv.url, body, limit=4, prewarm_connections=prewarm))
    assert all(r.completion_tokens == 3 for r in results)
    assert srv.peak_open == 4 and srv.opened == 4  # all 4 used, and kept alive
    assert sum(e.method == "POST" for e in srv.exchanges) == 24


def test_keep_alive_age_counts_from_the_answer_not_from_the_return_to_the_pool(monkeypatch):
    """Prewarm holds every connection until all have answered. One the server answered at once,
    then held past the keep-alive limit while another was slow, is as old as the server sees
    it (the server may be closing it right now): it is closed, never reused."""
    monkeypatch.setattr("replay.driver.http_raw_pool.KEEPALIVE_S", 0.5)

    async def script(ex) -> bool:
        if ex.method == "GET" and ex.conn_id == 1:
            await asyncio.sleep(1.0)  # the slow one: answered after the other aged out
        if ex.method == "POST":
            ex.writer.write(_response("length", sse_body(50, 3)))
        else:
            ex.writer.write(_response("length", b'{"data": []}', ctype=b"application/json"))
        return True

    async def body(t):  # two at once: both connections are wanted
        return await asyncio.gather(t.complete(_req(0, "a")), t.complete(_req(0, "b")))

    with ScriptServer(script) as srv:
        results = asyncio.run(_with(srv.url, body, limit=2, prewarm_connections=2))
    assert [r.completion_tokens for r in results] == [3, 3]
    posts = sorted(e.conn_id for e in srv.exchanges if e.method == "POST")
    assert posts == [1, 2]  # the young one and a fresh one; the old one never


def test_waiting_for_a_free_connection_ends_at_the_request_deadline():
    async def script(ex) -> bool:
        return True

    async def body(t):
        pool = t._pool
        loop = asyncio.get_running_loop()
        held = await pool.acquire(loop.time() + 1.0)  # the only connection, kept busy
        t0 = loop.time()
        with pytest.raises(RequestFailed) as e:
            await pool.acquire(t0 + 0.2)
        waited_s = loop.time() - t0
        pool.release(held)
        return e.value, waited_s

    with ScriptServer(script) as srv:
        err, waited_s = asyncio.run(_with(srv.url, body, limit=1))
    assert err.kind == "timeout" and "no free connection" in str(err)
    assert 0.19 <= waited_s < 0.6
    assert srv.opened == 1  # the waiting request never opened a connection of its own


def test_cancelled_request_frees_its_connection_slot():
    """A call cancelled in flight (Ctrl-C) gives its slot back: with limit 1 the next one runs."""

    async def script(ex) -> bool:
        if ex.index == 0:
            await asyncio.sleep(10)  # never answered in time; the server is shut down later
            return False
        ex.writer.write(_response("length", sse_body(50, 3)))
        return True

    async def body(t):
        hung = asyncio.ensure_future(t.complete(_req(0)))
        await asyncio.sleep(0.05)
        hung.cancel()
        with pytest.raises(asyncio.CancelledError):
            await hung
        return await asyncio.wait_for(t.complete(_req(1)), 5)

    with ScriptServer(script) as srv:
        res = asyncio.run(_with(srv.url, body, limit=1))
    assert res.completion_tokens == 3 and srv.opened == 2


def test_garbage_instead_of_http_is_malformed():
    async def script(ex) -> bool:
        ex.writer.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        return False

    with ScriptServer(script) as srv, pytest.raises(RequestFailed) as e:
        asyncio.run(_with(srv.url, lambda t: t.complete(_req())))
    assert e.value.kind == "malformed"


@pytest.mark.parametrize("prompt_tokens", [50, 2_500_000])
def test_server_closing_before_answering_is_a_connection_error_not_a_resend(prompt_tokens):
    """The request was written whole, so the server may have acted on it: no second send.
    (2.5M tokens: the body outgrows the socket buffers and drains from the transport's buffer
    while the server reads it; the transport must still know it was all written.)"""

    async def script(ex) -> bool:
        return False

    req = CompletionRequest("a", 0, np.arange(prompt_tokens, dtype=np.int32), 3)
    with ScriptServer(script) as srv, pytest.raises(RequestFailed) as e:
        asyncio.run(_with(srv.url, lambda t: t.complete(req), request_timeout_s=30))
    assert e.value.kind == "connection"
    assert len(srv.exchanges) == 1 and srv.opened == 1


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl tool")
def test_https_url_speaks_tls(tmp_path, monkeypatch):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the client trusts this certificate only
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)

    async def main():
        async def handle(reader, writer):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(_response("length", sse_body(50, 3)))
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]
        try:
            return await _with(f"https://127.0.0.1:{port}", lambda t: t.complete(_req()))
        finally:
            server.close()
            await server.wait_closed()

    res = asyncio.run(main())
    assert res.completion_tokens == 3


@pytest.mark.parametrize("how", ["abort", "close"])
def test_idle_connection_the_loop_has_not_seen_close_is_not_reused(how):
    """The server closes (or resets) an idle connection while the client's loop is not looking:
    the check before reuse sees it on the socket, and the request goes out on a fresh
    connection, without a failed write or a second send."""

    async def script(ex) -> bool:
        ex.writer.write(_response("length", sse_body(50, 3)))
        return True

    async def body(t, srv):
        first = await t.complete(_req(0))
        # blocking on purpose: the client's loop must not poll (and see the close) before it
        # reuses the connection; the kernel has the FIN or RST once this returns
        getattr(srv, how)(0)
        second = await t.complete(_req(1))
        return first, second

    with ScriptServer(script) as srv:
        first, second = asyncio.run(_with(srv.url, lambda t: body(t, srv)))
    assert first.completion_tokens == second.completion_tokens == 3
    assert "stale_connection_retries" not in second.extra
    assert srv.opened == 2 and [e.conn_id for e in srv.exchanges] == [0, 1]


@settings(max_examples=200, deadline=None)
@given(
    chunks=st.lists(st.binary(max_size=12), max_size=8),
    data=st.data(),
)
def test_rest_after_a_partial_send_is_exactly_the_unsent_bytes(chunks, data):
    whole = b"".join(chunks)
    sent = data.draw(st.integers(0, len(whole)))
    views = [c if i % 2 else memoryview(c) for i, c in enumerate(chunks)]
    assert b"".join(_rest(views, sent)) == whole[sent:]
