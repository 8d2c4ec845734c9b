"""The raw transport's connections to one origin: at most `limit` keep-alive connections, idle ones
reused last in, first out, too-old or peer-closed ones dropped before reuse. One connection's
exchange is `replay.driver.http_raw_conn.RawConnection`; the transport that builds and sends the
requests is `replay.driver.http_raw.RawTransport`."""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from urllib.parse import urlsplit

from replay.driver.http_common import HttpOptions
from replay.driver.http_errors import ErrorMap
from replay.driver.http_raw_conn import RawConnection
from replay.errors import ErrorKind, RequestFailed

__all__ = ["RawConnectionPool", "KEEPALIVE_S"]

# Idle connections older than this are closed, not reused: below the 5 s idle timeout of
# cpp-httplib (llama.cpp) and uvicorn (vLLM, SGLang), as in the aiohttp transport.
KEEPALIVE_S = 4.0
# what `create_connection` raises, most specific first (SSLError and ConnectionError are OSErrors)
_CONNECT_ERRORS = ErrorMap(
    (
        (TimeoutError, "connect_timeout"),
        ((ssl.SSLError, ssl.CertificateError), "tls"),
        (OSError, "connect"),
    )
)


class RawConnectionPool:
    """At most `limit` keep-alive connections to one origin; idle ones reused last in, first out.

    A connection the server closed while idle is dropped when the loop sees the close or, at the
    latest, when the socket is peeked before reuse (`RawConnection.peer_closed`); one idle for
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
        self._idle: deque[RawConnection] = deque()
        self._waiters: deque[asyncio.Future] = deque()
        self._open = 0  # connections connecting, idle or busy
        self.peak_open = 0
        self.closed = False

    def take_idle(self) -> RawConnection | None:
        """The most recently used idle connection still open, or None (no waiting, no connect)."""
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
        return None

    async def acquire(self, deadline_s: float) -> RawConnection:
        conn = self.take_idle()
        if conn is not None:
            return conn
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

    async def _connect(self, deadline_s: float) -> RawConnection:
        self._open += 1
        self.peak_open = max(self.peak_open, self._open)
        conn = RawConnection(self)
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

    def release(self, conn: RawConnection) -> None:
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

    def _wake_one(self, conn: RawConnection | None) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(conn)
                return

    def _connection_lost(self, conn: RawConnection) -> None:
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
