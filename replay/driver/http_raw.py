"""HTTP transport on asyncio protocols and httptools: the least client CPU per call.

At ~2K requests/s most of a general-purpose client's per-call CPU goes to machinery a replay does
not need (cookie jars, redirects, tracing hooks, header multidicts, stream readers). This module
speaks just the HTTP/1.1 a replay uses: one POST with a Content-Length body, written with one
`writelines` of the header bytes and the body parts (no join of a 0.6 MB prompt here); the response
(Content-Length, chunked, or read to close) is parsed by httptools' C parser and fed straight to
`SseAccumulator`. Connections are kept alive in a pool of at most `HttpOptions.limit`, reused last
in, first out. Errors while connecting go through the shared `ErrorMap` (`_CONNECT_ERRORS`); the
parser and the protocol callbacks raise the same kinds and words directly; nothing from httptools
or the socket layer leaves this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import sys
from collections import deque
from urllib.parse import urlsplit

import httptools

from replay.driver.http_common import (
    COMPLETIONS_PATH,
    MODELS_PATH,
    HttpOptions,
    PromptEncoder,
    ReadyBodies,
    body_parts,
)
from replay.driver.http_errors import (
    ErrorMap,
    StaleConnection,
    bad_response,
    cut_off,
    http_status_error,
    lost,
    resend_once,
    timed_out,
)
from replay.driver.sse import (
    SseAccumulator,
    parse_json,
)
from replay.errors import ErrorKind, RequestFailed
from replay.protocol import CompletionRequest, CompletionResult

__all__ = ["RawTransport", "RawConnectionPool"]

# Idle connections older than this are closed, not reused: below the 5 s idle timeout of
# cpp-httplib (llama.cpp) and uvicorn (vLLM, SGLang), as in the aiohttp transport.
KEEPALIVE_S = 4.0
_PEEK_FLAGS = socket.MSG_PEEK | socket.MSG_DONTWAIT
# asyncio's selector transport joins what `writelines` gets before Python 3.12
_JOINING_WRITELINES = sys.version_info < (3, 12) and hasattr(socket.socket, "sendmsg")
_MAX_PARTS = 512  # well under IOV_MAX (1024); PromptEncoder keeps prompts to ~256 parts
# what `create_connection` raises, most specific first (SSLError and ConnectionError are OSErrors)
_CONNECT_ERRORS = ErrorMap(
    (
        (TimeoutError, "connect_timeout"),
        ((ssl.SSLError, ssl.CertificateError), "tls"),
        (OSError, "connect"),
    )
)


def _rest(chunks: list, sent_bytes: int) -> list:
    """What is left of `chunks` after the first `sent_bytes` bytes."""
    for i, c in enumerate(chunks):
        n = len(c)
        if sent_bytes < n:
            return [memoryview(c)[sent_bytes:], *chunks[i + 1 :]]
        sent_bytes -= n
    return []


class _Connection(asyncio.Protocol):
    """One keep-alive connection, one request at a time; also the httptools callback target.

    `exchange()` writes a request and returns when its response is complete (the result of
    `finish`) or raises `RequestFailed`. Afterwards `reusable` says whether the pool may keep it.
    """

    def __init__(self, pool: RawConnectionPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self.in_idle = False
        self.idle_since_s = 0.0
        self.answered = 0  # responses completed on this connection (a warm-up GET counts)
        self._fut: asyncio.Future | None = None
        self._parser: httptools.HttpResponseParser | None = None
        self._acc: SseAccumulator | None = None
        self._reset()

    def _reset(self) -> None:
        self._status = 0
        self._streamed = False
        self._has_length = False  # Content-Length or chunked; else the body ends at close
        self._keep_alive = True
        self._headers_done = False
        self._complete = False
        self._got_bytes = False
        self._written_all = False
        self._body: list[bytes] = []

    # --- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport
        sock = transport.get_extra_info("socket")
        # asyncio's TransportSocket wraps the real socket; uvloop's stand-in has only the fd
        self._sock: socket.socket | None = getattr(sock, "_sock", None)
        self._fd: int = sock.fileno() if sock is not None else -1
        # Any bytes left in the transport's buffer pause us, and resume_writing comes when the
        # buffer is empty again: the one sign that the whole request reached the kernel, which
        # decides whether a lost connection may be resent (_lost_error). We write one request
        # at a time, so there is nothing to throttle on pause.
        transport.set_write_buffer_limits(high=0, low=0)

    def data_received(self, data: bytes) -> None:
        if self._fut is None or self._fut.done():
            # bytes nobody asked for (or after a failed exchange): the stream is out of step
            self.abort()
            return
        self._got_bytes = True
        self._written_all = True  # the server answers: it had our request (or refused it)
        try:
            self._parser.feed_data(data)  # type: ignore[union-attr]
        except httptools.HttpParserCallbackError as e:
            cause = e.__context__
            if isinstance(cause, RequestFailed):
                self._fail(cause)
            else:
                self._fail(bad_response(repr(cause or e)))
        except httptools.HttpParserError as e:
            self._fail(bad_response(repr(e)))

    def resume_writing(self) -> None:
        self._written_all = True

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        fut = self._fut
        if fut is not None and not fut.done():
            if self._headers_done and not self._has_length and not self._complete:
                self._keep_alive = False
                self.on_message_complete()  # a body delimited by the close is now whole
            else:
                fut.set_exception(self._lost_error(exc))
        self.pool._connection_lost(self)

    def _lost_error(self, exc: Exception | None) -> BaseException:
        # A kept-alive connection that the server closes cleanly (FIN, no error) before a byte of
        # the answer is one it was retiring as our request crossed the close (llama.cpp did this
        # about once in 400 calls, with the whole request already in the kernel): a server that
        # had read the request would answer it, and one that died resets or refuses the resend.
        retired = exc is None and self.answered > 0
        if not self._got_bytes and (not self._written_all or retired):
            return StaleConnection(repr(exc) if exc else "closed by peer")
        why = repr(exc) if exc else "closed by the server"
        if self._got_bytes:
            return cut_off(why)
        return lost(why)

    # --- httptools callbacks -----------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-type":
            self._streamed = value.lower().startswith(b"text/event-stream")
        elif name == b"content-length" or name == b"transfer-encoding":
            self._has_length = True

    def on_headers_complete(self) -> None:
        self._headers_done = True
        self._status = self._parser.get_status_code()  # type: ignore[union-attr]
        self._keep_alive = self._parser.should_keep_alive()  # type: ignore[union-attr]
        if self._status >= 400 or self._acc is None:
            self._streamed = False

    def on_body(self, body: bytes) -> None:
        if self._streamed:
            self._acc.feed_bytes(body, self.pool.loop.time())  # type: ignore[union-attr]
        else:
            self._body.append(body)

    def on_message_complete(self) -> None:
        self._complete = True
        self.answered += 1
        # The server's keep-alive clock starts when it has sent the response, not when the pool
        # gets the connection back: a caller that holds a connection after its answer (prewarm
        # waits for all of its connections) must not make it look younger than the server sees.
        self.idle_since_s = self.pool.loop.time()
        self._keep_alive = self._keep_alive and self._parser.should_keep_alive()  # type: ignore[union-attr]
        fut = self._fut
        if fut is None or fut.done():
            return
        try:
            fut.set_result(self._finish())
        except RequestFailed as e:
            fut.set_exception(e)

    def _finish(self):
        now = self.pool.loop.time()
        body = b"".join(self._body)
        if self._status >= 400:
            raise http_status_error(self._status, body)
        acc = self._acc
        if acc is None:
            return body
        if self._streamed:
            acc.flush(now)
            return acc.result(now, True)
        acc.feed_object(parse_json(body), now)
        return acc.result(now, False)

    # --- one exchange --------------------------------------------------------------------------

    async def exchange(self, chunks: list, acc: SseAccumulator | None, deadline_s: float):
        """Write `chunks` as one request and wait for the whole response (result of `_finish`)."""
        loop = self.pool.loop
        self._reset()
        self._acc = acc
        self._parser = httptools.HttpResponseParser(self)
        fut = self._fut = loop.create_future()
        timer = loop.call_at(deadline_s, self._timed_out)
        try:
            if self.lost:
                raise StaleConnection("closed before the request was written")
            transport = self.transport
            assert transport is not None
            self._write(transport, chunks)
            # a write that failed leaves an empty buffer too, but a closing transport
            if not transport.is_closing() and transport.get_write_buffer_size() == 0:
                self._written_all = True
            return await fut
        finally:
            timer.cancel()
            self._fut = None
            self._acc = None

    def _write(self, transport: asyncio.Transport, chunks: list) -> None:
        """Hand the request to the kernel without joining its parts where that pays.

        Python 3.11's selector transport implements `writelines` as a join and a write: for a
        100K-token prompt that is a 0.6 MB copy per call (~7% of the client's CPU per call). With
        the transport's buffer empty, one `sendmsg` of the parts writes them as they are; what the
        kernel does not take goes to the transport as usual. Python >= 3.12 and uvloop do this in
        `writelines` themselves; TLS must go through the transport.
        """
        sock = self._sock
        if (
            _JOINING_WRITELINES
            and sock is not None
            and self.pool.ssl is None
            and 2 < len(chunks) <= _MAX_PARTS
            and not transport.get_write_buffer_size()
            and not transport.is_closing()
        ):
            try:
                sent = sock.sendmsg(chunks)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                transport.writelines(chunks)  # fails the same way, through the transport
                return
            if sent:
                chunks = _rest(chunks, sent)
                if not chunks:
                    return
        transport.writelines(chunks)

    def _timed_out(self) -> None:
        self._fail(timed_out(self.pool.request_timeout_s))

    def _fail(self, error: RequestFailed) -> None:
        """Fail the exchange in flight and drop the connection (its stream is out of step)."""
        fut = self._fut
        if fut is not None and not fut.done():
            fut.set_exception(error)
        self.abort()

    @property
    def reusable(self) -> bool:
        # a server may answer (an early error) before it has read all of a request: the rest
        # of the body would then be read as the next request, so such a connection is retired
        return (
            self._complete
            and self._keep_alive
            and not self.lost
            and self.transport is not None
            and not self.transport.get_write_buffer_size()
        )

    def peer_closed(self) -> bool:
        """Whether the server has closed (or reset) this idle connection, looking at the socket
        itself: the loop learns of a close only at its next poll, and a request written into a
        connection the server already closed is lost. One non-blocking peek, ~1 us."""
        if self.lost or self.transport is None or self.transport.is_closing():
            return True
        if self.pool.ssl is not None:
            return False  # a peek would see TLS records, not the HTTP stream
        try:
            if self._sock is not None:
                self._sock.recv(1, _PEEK_FLAGS)
            else:
                s = socket.socket(fileno=self._fd)
                try:
                    s.recv(1, _PEEK_FLAGS)
                finally:
                    s.detach()
        except (BlockingIOError, InterruptedError):
            return False  # nothing to read: open and quiet, as an idle connection should be
        except OSError:
            return True
        return True  # end of stream, or bytes nobody asked for: either way not reusable

    def abort(self) -> None:
        self._keep_alive = False
        if self.transport is not None and not self.lost:
            self.transport.abort()


class RawConnectionPool:
    """At most `limit` keep-alive connections to one origin; idle ones reused last in, first out.

    A connection the server closed while idle is dropped when the loop sees the close or, at the
    latest, when the socket is peeked before reuse (`_Connection.peer_closed`); one idle for
    longer than `KEEPALIVE_S` is closed instead of reused. When the limit is reached, requests
    wait in arrival order.
    """

    def __init__(self, options: HttpOptions) -> None:
        self.options = options
        self.request_timeout_s = options.request_timeout_s
        self.loop = asyncio.get_running_loop()
        parts = urlsplit(options.root)
        self.host = parts.hostname or "127.0.0.1"
        tls = parts.scheme == "https"
        self.port = parts.port or (443 if tls else 80)
        self.path_prefix = parts.path.rstrip("/")
        self.ssl: ssl.SSLContext | None = ssl.create_default_context() if tls else None
        default_port = (tls and self.port == 443) or (not tls and self.port == 80)
        self.host_header = self.host if default_port else f"{self.host}:{self.port}"
        if ":" in self.host and not default_port:  # IPv6 literal
            self.host_header = f"[{self.host}]:{self.port}"
        self._idle: deque[_Connection] = deque()
        self._waiters: deque[asyncio.Future] = deque()
        self._open = 0  # connections connecting, idle or busy
        self.peak_open = 0
        self.closed = False

    async def acquire(self, deadline_s: float) -> _Connection:
        idle = self._idle
        while idle:
            conn = idle.pop()
            conn.in_idle = False
            if self.loop.time() - conn.idle_since_s > KEEPALIVE_S:
                # the most recently used is too old, so all are: `release` closes the rest a
                # few at a time (closing hundreds at once would stall the loop)
                conn.abort()
                break
            if not conn.peer_closed():
                return conn
            conn.abort()
        while True:
            if self._open < self.options.limit:
                return await self._connect(deadline_s)
            fut = self.loop.create_future()
            self._waiters.append(fut)
            try:
                async with asyncio.timeout_at(deadline_s):
                    conn = await fut
            except BaseException as e:
                if fut.done() and not fut.cancelled():
                    handed = fut.result()
                    if handed is not None:
                        self.release(handed)  # handed over just as we gave up
                    else:
                        self._wake_one(None)  # pass the free slot on
                if isinstance(e, TimeoutError):
                    raise RequestFailed(
                        ErrorKind.TIMEOUT, f"no free connection within {self.request_timeout_s:g} s"
                    ) from None
                raise
            if conn is not None:
                return conn

    async def _connect(self, deadline_s: float) -> _Connection:
        self._open += 1
        self.peak_open = max(self.peak_open, self._open)
        conn = _Connection(self)
        timeout_s = min(self.options.connect_timeout_s, max(0.0, deadline_s - self.loop.time()))
        try:
            await asyncio.wait_for(
                self.loop.create_connection(
                    lambda: conn,
                    self.host,
                    self.port,
                    ssl=self.ssl,
                    server_hostname=self.host if self.ssl else None,
                ),
                timeout_s,
            )
        except BaseException as e:
            if conn.transport is not None:  # connected as the wait ended: drop it
                conn.abort()  # connection_lost gives the slot back
            else:
                self._open -= 1
                self._wake_one(None)
            error = _CONNECT_ERRORS.error(e, self.options, connect_timeout_s=timeout_s)
            if error is None:
                raise
            raise error from None
        if self.closed:
            conn.abort()
            raise RequestFailed(ErrorKind.CANCELLED, "transport closed while connecting")
        return conn

    def release(self, conn: _Connection) -> None:
        """Hand a finished connection to the next waiter, keep it idle, or close it."""
        now = self.loop.time()
        # too old: answered long ago and held by its caller since (the server may be closing it)
        if not conn.reusable or self.closed or now - conn.idle_since_s > KEEPALIVE_S:
            conn.abort()  # connection_lost passes the free slot to a waiter
            return
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(conn)
                return
        idle = self._idle
        conn.in_idle = True
        idle.append(conn)
        for _ in range(2):  # expire the least recently used (LIFO leaves them at the left end)
            if now - idle[0].idle_since_s <= KEEPALIVE_S:
                break
            old = idle.popleft()
            old.in_idle = False
            old.abort()

    def _wake_one(self, conn: _Connection | None) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(conn)
                return

    def _connection_lost(self, conn: _Connection) -> None:
        self._open -= 1
        if conn.in_idle:  # closed by the server while idle
            conn.in_idle = False
            self._idle.remove(conn)
        self._wake_one(None)

    async def close(self) -> None:
        self.closed = True
        while self._idle:
            conn = self._idle.pop()
            conn.in_idle = False
            conn.abort()
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.cancel()
        await asyncio.sleep(0)  # let connection_lost run

    @property
    def open_connections(self) -> int:
        return self._open


class RawTransport:
    """Sends /v1/completions over `RawConnectionPool` with orjson bodies and incremental encoding."""

    name = "raw"

    def __init__(self, options: HttpOptions, *, incremental: bool = True) -> None:
        self.options = options
        self._encoder = PromptEncoder() if incremental else None
        self._bodies = ReadyBodies(self._request_chunks)
        self._pool: RawConnectionPool | None = None
        self._post_head = b""
        self._get_models = b""

    async def start(self) -> None:
        pool = self._pool = RawConnectionPool(self.options)
        hh = pool.host_header
        host = hh.encode("ascii") if hh.isascii() else hh.encode("idna")
        self._post_head = (
            b"POST " + (pool.path_prefix + COMPLETIONS_PATH).encode() + b" HTTP/1.1\r\n"
            b"Host: " + host + b"\r\n"
            b"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
            b"Content-Length: "
        )
        self._get_models = (
            b"GET " + (pool.path_prefix + MODELS_PATH).encode() + b" HTTP/1.1\r\n"
            b"Host: " + host + b"\r\nAccept: application/json\r\n\r\n"
        )
        if self.options.prewarm_connections:
            await self._prewarm(self.options.prewarm_connections)

    async def _prewarm(self, n: int) -> None:
        """Open `n` keep-alive connections now; failures are ignored (the pool handles them)."""
        pool = self._pool
        assert pool is not None
        deadline_s = pool.loop.time() + self.options.connect_timeout_s
        conns: list[_Connection] = []

        async def one() -> None:
            with contextlib.suppress(RequestFailed, StaleConnection, OSError, TimeoutError):
                conn = await pool._connect(deadline_s)
                try:
                    await conn.exchange([self._get_models], None, deadline_s)
                finally:
                    conns.append(conn)

        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                asyncio.gather(*(one() for _ in range(n))), 2 * self.options.connect_timeout_s
            )
        for conn in conns:  # released only now, so that each `one()` opened its own
            pool.release(conn)

    async def close(self) -> None:
        self._bodies.clear()
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    def prepare(self, request: CompletionRequest) -> None:
        """Build the request's bytes now (head and body parts), for `complete` to only write."""
        self._bodies.prepare(request)

    def _request_chunks(self, request: CompletionRequest) -> list:
        parts = self._encoder.encode(request.task, request.prompt) if self._encoder else None
        body = body_parts(self.options.model, request, parts)
        length = 0
        for b in body:
            length += len(b)
        return [self._post_head + b"%d\r\n\r\n" % length, *body]

    async def complete(self, request: CompletionRequest) -> CompletionResult:
        if self._pool is None:
            raise RuntimeError("RawTransport.complete() before start()")
        chunks = self._bodies.take(request)
        deadline_s = self._pool.loop.time() + self.options.request_timeout_s
        try:
            return await self._send(chunks, deadline_s)
        except StaleConnection:
            return await resend_once(self._send, chunks, deadline_s)

    async def _send(self, chunks: list, deadline_s: float) -> CompletionResult:
        pool = self._pool
        assert pool is not None
        conn = await pool.acquire(deadline_s)
        try:
            return await conn.exchange(chunks, SseAccumulator(), deadline_s)
        finally:
            pool.release(conn)
