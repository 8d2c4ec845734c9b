"""HTTP transport on asyncio protocols and httptools: the least client CPU per call.

At ~2K requests/s most of a general-purpose client's per-call CPU goes to machinery a replay does
not need (cookie jars, redirects, tracing hooks, header multidicts, stream readers). This module
speaks just the HTTP/1.1 a replay uses: one POST with a Content-Length body, written with one
`writelines` of the header bytes and the body parts (no join of a 0.6 MB prompt here); the response
is parsed by httptools' C parser and fed straight to `SseAccumulator` (one connection's exchange is
`replay.driver.http_raw_conn.RawConnection`). Connections are kept alive in a pool of at most
`HttpOptions.limit`, reused last in, first out. A long request can be staged (`stage`): written
but its last byte ahead of its deadline, the last byte at it. Errors while connecting go through
the shared `ErrorMap` (`_CONNECT_ERRORS`); the parser and the protocol callbacks raise the same
kinds and words directly; nothing from httptools or the socket layer leaves these two modules.
"""

from __future__ import annotations

import asyncio
import contextlib

from replay.driver.http_common import (
    COMPLETIONS_PATH,
    MODELS_PATH,
    HttpOptions,
    PromptEncoder,
    ReadyBodies,
    body_parts,
)
from replay.driver.http_errors import StaleConnection, resend_once
from replay.driver.http_raw_conn import RawConnection
from replay.driver.http_raw_pool import RawConnectionPool
from replay.driver.sse import SseAccumulator
from replay.errors import RequestFailed
from replay.protocol import CompletionRequest, CompletionResult

__all__ = ["RawTransport", "RawConnectionPool"]

# Requests of fewer bytes are written whole at their deadline, not staged (`RawTransport.stage`):
# their write costs about what the last byte's does, and staging would add a second write
STAGE_MIN_BYTES = 16 * 1024


class RawTransport:
    """Sends /v1/completions over `RawConnectionPool` with orjson bodies and incremental encoding."""

    name = "raw"

    def __init__(self, options: HttpOptions, *, incremental: bool = True) -> None:
        self.options = options
        self._encoder = PromptEncoder() if incremental else None
        self._bodies = ReadyBodies(self._request_chunks)
        self._pool: RawConnectionPool | None = None
        # calls whose request is written but its last byte (`stage`): (task, call) -> the
        # connection and the request's whole bytes (for a resend)
        self._staged: dict[tuple[str, int], tuple[RawConnection, list]] = {}
        # staged calls whose last byte `fire` wrote: the connection, the request's bytes, and
        # the begun exchange that `complete` waits on
        self._fired: dict[tuple[str, int], tuple[RawConnection, list, tuple]] = {}
        # fired calls written but not yet reading their response (`arm_fired`)
        self._unarmed: list[tuple[tuple[str, int], RawConnection, list]] = []
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
        conns: list[RawConnection] = []

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
        self.arm_fired()  # so that `_fired` below holds every written call
        self._bodies.clear()
        for conn, _ in self._staged.values():  # never finished: the server drops the request
            conn.abort()
        self._staged.clear()
        for conn, _, begun in self._fired.values():  # never waited for: nobody reads the answer
            conn.drop(begun)
        self._fired.clear()
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

    def stage(self, request: CompletionRequest) -> bool:
        """Write all of the request's prepared bytes but the last one, on an idle connection,
        ahead of its deadline: `fire` or `complete` then writes one byte. A server reads a
        request only once its whole body is in (Content-Length framing), so it sees the request
        at the deadline; the deadline's write no longer carries the body. Not staged (sent whole
        by `complete`, as without staging; returns False): a body not prepared, a small one, or
        no idle connection (staging never waits or connects)."""
        pool = self._pool
        chunks = self._bodies.get(request)
        if pool is None or chunks is None or _length(chunks) < STAGE_MIN_BYTES:
            return False
        conn = pool.take_idle()
        if conn is None:
            return False
        self._bodies.take(request)
        conn.write_ahead(_all_but_last_byte(chunks))
        self._staged[(request.task, request.call)] = (conn, chunks)
        return True

    def fire(self, request: CompletionRequest) -> bool:
        """Write a built request now, without waiting for anything: a staged one's last byte, or
        the whole request on an idle connection. For sending the calls due at one instant back
        to back, in one loop callback, which then calls `arm_fired` once (before it returns to
        the loop); `complete` returns the response. False (nothing written; `complete` sends it
        as usual): no body built, no idle connection, or a staged connection lost meanwhile."""
        pool = self._pool
        if pool is None:
            return False
        key = (request.task, request.call)
        staged = self._staged.get(key)
        if staged is not None:
            conn, chunks = staged
            if conn.lost:
                return False
            head = _last_byte(chunks)
        else:
            built = self._bodies.get(request)
            idle = pool.take_idle() if built is not None else None
            if built is None or idle is None:
                return False
            conn = idle
            chunks = head = built
        try:
            conn.write_request(head)
        except StaleConnection:  # lost before the write: `complete` sends it afresh
            if staged is None:
                pool.release(conn)
            return False
        if staged is None:
            self._bodies.take(request)
        else:
            del self._staged[key]
        self._unarmed.append((key, conn, chunks))
        return True

    def arm_fired(self) -> None:
        """Start reading the responses of the requests `fire` wrote since the last call. Arming
        after a burst's writes, not between them, leaves ~10 us of Python a call out of the gap
        between two sends of the burst. `complete` and `unstage` call it too, so a fired call is
        armed before anything waits on it or drops it."""
        unarmed = self._unarmed
        if not unarmed:
            return
        self._unarmed = []
        assert self._pool is not None
        deadline_s = self._pool.loop.time() + self.options.request_timeout_s
        for key, conn, chunks in unarmed:
            self._fired[key] = (conn, chunks, conn.arm(SseAccumulator(), deadline_s))

    def unstage(self, request: CompletionRequest) -> None:
        """The staged (or fired) request will not be sent or waited for: drop its connection (a
        request cannot be taken back, and the server drops one whose body never ends, or whose
        answer cannot be delivered, when its connection closes)."""
        self.arm_fired()
        key = (request.task, request.call)
        got = self._staged.pop(key, None)
        if got is not None:
            got[0].abort()
        fired = self._fired.pop(key, None)
        if fired is not None:
            fired[0].drop(fired[2])

    async def complete(self, request: CompletionRequest) -> CompletionResult:
        if self._pool is None:
            raise RuntimeError("RawTransport.complete() before start()")
        self.arm_fired()
        key = (request.task, request.call)
        fired = self._fired.pop(key, None)
        if fired is not None:
            conn, chunks, begun = fired
            deadline_s = self._pool.loop.time() + self.options.request_timeout_s
            try:
                return await self._finish_fired(conn, begun)
            except StaleConnection:  # closed before the server had the last byte
                return await resend_once(self._send, chunks, deadline_s)
        staged = self._staged.pop(key, None)
        if staged is not None:
            conn, chunks = staged
            deadline_s = self._pool.loop.time() + self.options.request_timeout_s
            try:
                return await self._finish_staged(conn, chunks, deadline_s)
            except StaleConnection:  # closed while staged: the server never had the last byte
                return await resend_once(self._send, chunks, deadline_s)
        chunks = self._bodies.take(request)
        deadline_s = self._pool.loop.time() + self.options.request_timeout_s
        try:
            return await self._send(chunks, deadline_s)
        except StaleConnection:
            return await resend_once(self._send, chunks, deadline_s)

    async def _finish_fired(self, conn: RawConnection, begun: tuple) -> CompletionResult:
        pool = self._pool
        assert pool is not None
        try:
            return await conn.finish(begun)
        finally:
            pool.release(conn)

    async def _finish_staged(
        self, conn: RawConnection, chunks: list, deadline_s: float
    ) -> CompletionResult:
        pool = self._pool
        assert pool is not None
        try:
            return await conn.exchange(_last_byte(chunks), SseAccumulator(), deadline_s)
        finally:
            pool.release(conn)

    async def _send(self, chunks: list, deadline_s: float) -> CompletionResult:
        pool = self._pool
        assert pool is not None
        conn = await pool.acquire(deadline_s)
        try:
            return await conn.exchange(chunks, SseAccumulator(), deadline_s)
        finally:
            pool.release(conn)


def _length(chunks: list) -> int:
    n = 0
    for c in chunks:
        n += len(c)
    return n


def _all_but_last_byte(chunks: list) -> list:
    last = chunks[-1]
    return [*chunks[:-1], memoryview(last)[:-1]] if len(last) > 1 else chunks[:-1]


def _last_byte(chunks: list) -> list:
    return [memoryview(chunks[-1])[-1:]]
