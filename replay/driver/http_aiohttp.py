"""HTTP transport on aiohttp: one session per run, keep-alive, connection limit = pool size.

At 1,024 agents it keeps send drift in the low milliseconds where httpx's connection pool does
not; the default is the raw transport, which spends less CPU per call (docs/driver.md). aiohttp's
errors are mapped by `_ERRORS` (the shared `ErrorMap`); nothing aiohttp-specific leaves this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

import aiohttp

from replay.driver.http_common import MODELS_PATH, HttpOptions
from replay.driver.http_errors import ErrorMap, http_status_error
from replay.driver.http_library import Exchange, LibraryTransport, prewarm
from replay.protocol import CompletionResult

__all__ = ["AiohttpTransport"]

# aiohttp's exceptions, most specific first (ClientConnectorError is a ClientOSError, the
# timeouts are OSErrors too)
_ERRORS = ErrorMap(
    (
        (aiohttp.ConnectionTimeoutError, "connect_timeout"),
        (aiohttp.ClientSSLError, "tls"),  # a ClientConnectorError too: before it
        (aiohttp.ClientConnectorError, "connect"),
        ((TimeoutError, aiohttp.ServerTimeoutError), "timeout"),
        (aiohttp.ClientPayloadError, "cut"),
        ((aiohttp.ClientOSError, aiohttp.ServerDisconnectedError, ConnectionError), "lost"),
        (aiohttp.ClientResponseError, "malformed"),
        (aiohttp.ClientError, "other"),
    )
)


class AiohttpTransport(LibraryTransport):
    """Sends /v1/completions over aiohttp with orjson bodies and incremental prompt encoding."""

    name = "aiohttp"
    _errors = _ERRORS

    def __init__(self, options: HttpOptions, *, incremental: bool = True) -> None:
        super().__init__(options, incremental=incremental)
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(
            limit=self.options.limit,
            limit_per_host=0,
            # below the 5 s idle timeout of cpp-httplib (llama.cpp) and uvicorn (vLLM, SGLang):
            # reusing a connection the server already closed fails the request
            keepalive_timeout=4.0,
            family=socket.AF_UNSPEC,
            ttl_dns_cache=None,
        )
        timeout = aiohttp.ClientTimeout(
            total=self.options.request_timeout_s,
            sock_connect=self.options.connect_timeout_s,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=timeout,
            auto_decompress=False,
            skip_auto_headers=("User-Agent",),
        )
        if self.options.prewarm_connections:
            await self._prewarm(self.options.prewarm_connections)

    async def _prewarm(self, n: int) -> None:
        """Open `n` keep-alive connections now; failures are ignored (the pool handles them)."""
        assert self._session is not None
        session, url = self._session, self.options.root + MODELS_PATH

        async def one() -> None:
            with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                async with session.get(url) as resp:
                    await resp.read()

        await prewarm(one, n, self.options.connect_timeout_s)

    async def close(self) -> None:
        self._bodies.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _started(self) -> bool:
        return self._session is not None

    async def _exchange(self, ex: Exchange) -> CompletionResult:
        assert self._session is not None
        loop = asyncio.get_running_loop()
        acc = ex.acc
        chunks = ex.upload.chunks()
        # no redirects: aiohttp followed a 302 as a GET elsewhere, as no other transport does
        post = self._session.post(self._url, data=chunks, headers=ex.headers, allow_redirects=False)
        async with post as resp:
            ex.answered = True
            if not 200 <= resp.status < 300:
                raise http_status_error(resp.status, await resp.read())
            streamed = resp.content_type == "text/event-stream"
            if streamed:
                async for chunk in resp.content.iter_any():
                    acc.feed_bytes(chunk, loop.time())
                acc.flush(loop.time())
            else:
                ex.whole_body(await resp.read(), loop.time())
            return acc.result(loop.time(), streamed)
