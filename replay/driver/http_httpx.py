"""HTTP transport on httpx (the project card's library; also used for control-plane calls).

Same requests, error map (`_ERRORS`, the shared `ErrorMap`) and resend rule as the other
transports. Not the default: httpcore 1.0.x re-scans
its whole connection pool on every request start and finish, which at hundreds of connections makes
the client, not the server, shape the send times (docs/driver.md has the numbers).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterable
from typing import cast

import httpx

from replay.driver.http_common import MODELS_PATH, HttpOptions
from replay.driver.http_errors import ErrorMap, http_status_error
from replay.driver.http_library import Exchange, LibraryTransport, prewarm
from replay.protocol import CompletionResult

__all__ = ["HttpxTransport"]

# httpx's exceptions, most specific first (ConnectTimeout is a TimeoutException)
_ERRORS = ErrorMap(
    (
        (httpx.ConnectTimeout, "connect_timeout"),
        (httpx.ConnectError, "connect"),
        ((TimeoutError, httpx.TimeoutException), "timeout"),
        # h11's parse errors ("illegal status line", ...) come as RemoteProtocolError too
        (httpx.RemoteProtocolError, lambda e: "lost" if _closed(e) else "malformed"),
        ((httpx.ReadError, httpx.WriteError), "lost"),
        (httpx.DecodingError, "malformed"),
        (httpx.HTTPError, "other"),
    )
)


def _closed(exc: BaseException) -> bool:
    """Whether httpcore's RemoteProtocolError says the peer closed the connection ("Server
    disconnected without sending a response", "peer closed connection without sending complete
    message body"), not that its bytes broke HTTP."""
    text = str(exc).lower()
    return "disconnected" in text or "closed" in text


class HttpxTransport(LibraryTransport):
    """Sends /v1/completions over one `httpx.AsyncClient` with orjson bodies."""

    name = "httpx"
    _errors = _ERRORS

    def __init__(self, options: HttpOptions, *, incremental: bool = True) -> None:
        super().__init__(options, incremental=incremental)
        self._client: httpx.AsyncClient | None = None

    async def start(self) -> None:
        n = self.options.limit
        self._client = httpx.AsyncClient(
            limits=httpx.Limits(
                max_connections=n, max_keepalive_connections=n, keepalive_expiry=4.0
            ),  # below the servers' 5 s idle timeout (see http_aiohttp)
            timeout=httpx.Timeout(
                self.options.request_timeout_s,
                connect=self.options.connect_timeout_s,
                pool=None,  # waiting for a free connection is the pool's business, not an error
            ),
        )
        if self.options.prewarm_connections:
            await self._prewarm(self.options.prewarm_connections)

    async def _prewarm(self, n: int) -> None:
        """Open `n` keep-alive connections now; failures are ignored (the pool handles them)."""
        assert self._client is not None
        client, url = self._client, self.options.root + MODELS_PATH

        async def one() -> None:
            with contextlib.suppress(httpx.HTTPError, OSError):
                await client.get(url)

        await prewarm(one, n, self.options.connect_timeout_s)

    async def close(self) -> None:
        self._bodies.clear()
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _started(self) -> bool:
        return self._client is not None

    async def _exchange(self, ex: Exchange) -> CompletionResult:
        assert self._client is not None
        loop = asyncio.get_running_loop()
        acc = ex.acc
        # httpx's timeouts are per read; the whole-request limit is the option's meaning
        async with asyncio.timeout(self.options.request_timeout_s):
            # memoryview pieces (no copy of the body): h11 joins what it sends as bytes-likes;
            # an explicit length (in the headers) keeps the iterable body out of chunked encoding
            content = cast(AsyncIterable[bytes], ex.upload.chunks())
            async with self._client.stream(
                "POST", self._url, content=content, headers=ex.headers
            ) as resp:
                ex.answered = True
                if not 200 <= resp.status_code < 300:
                    raise http_status_error(resp.status_code, await resp.aread())
                ctype = resp.headers.get("content-type", "")
                streamed = ctype.lower().startswith("text/event-stream")  # case-blind (RFC 9110)
                if streamed:
                    async for chunk in resp.aiter_raw():
                        acc.feed_bytes(chunk, loop.time())
                    acc.flush(loop.time())
                else:
                    ex.whole_body(await resp.aread(), loop.time())
                return acc.result(loop.time(), streamed)
