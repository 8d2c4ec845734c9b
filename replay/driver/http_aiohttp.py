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

from replay.driver.http_common import (
    COMPLETIONS_PATH,
    MODELS_PATH,
    HttpOptions,
    PromptEncoder,
    ReadyBodies,
    build_body,
)
from replay.driver.http_errors import (
    ErrorMap,
    StaleConnection,
    TrackedBody,
    http_status_error,
    resend_once,
)
from replay.driver.sse import (
    SseAccumulator,
    parse_json,
)
from replay.errors import RequestFailed
from replay.protocol import CompletionRequest, CompletionResult

__all__ = ["AiohttpTransport"]

_HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}
# aiohttp's exceptions, most specific first (ClientConnectorError is a ClientOSError, the
# timeouts are OSErrors too)
_ERRORS = ErrorMap(
    (
        (aiohttp.ConnectionTimeoutError, "connect_timeout"),
        (aiohttp.ClientConnectorError, "connect"),
        ((TimeoutError, aiohttp.ServerTimeoutError), "timeout"),
        (aiohttp.ClientPayloadError, "cut"),
        ((aiohttp.ClientOSError, aiohttp.ServerDisconnectedError, ConnectionError), "lost"),
        (aiohttp.ClientResponseError, "malformed"),
        (aiohttp.ClientError, "other"),
    )
)


class AiohttpTransport:
    """Sends /v1/completions over aiohttp with orjson bodies and incremental prompt encoding."""

    name = "aiohttp"

    def __init__(self, options: HttpOptions, *, incremental: bool = True) -> None:
        self.options = options
        self._url = options.root + COMPLETIONS_PATH
        self._encoder = PromptEncoder() if incremental else None
        self._bodies = ReadyBodies(self._body)
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

        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                asyncio.gather(*(one() for _ in range(n))), self.options.connect_timeout_s
            )

    def prepare(self, request: CompletionRequest) -> None:
        """Build the request body now, for `complete` to only send it."""
        self._bodies.prepare(request)

    def _body(self, request: CompletionRequest) -> bytes:
        parts = self._encoder.encode(request.task, request.prompt) if self._encoder else None
        return build_body(self.options.model, request, parts)

    async def close(self) -> None:
        self._bodies.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def complete(self, request: CompletionRequest) -> CompletionResult:
        if self._session is None:
            raise RuntimeError("AiohttpTransport.complete() before start()")
        body = self._bodies.take(request)
        try:
            return await self._post(body)
        except StaleConnection:
            return await resend_once(self._post, body)

    async def _post(self, body: bytes) -> CompletionResult:
        assert self._session is not None
        loop = asyncio.get_running_loop()
        acc = SseAccumulator()
        got_response = False
        upload = TrackedBody(body)
        headers = {**_HEADERS, "Content-Length": str(len(body))}
        try:
            async with self._session.post(self._url, data=upload.chunks(), headers=headers) as resp:
                got_response = True
                if resp.status >= 400:
                    raise http_status_error(resp.status, await resp.read())
                streamed = resp.content_type == "text/event-stream"
                if streamed:
                    async for chunk in resp.content.iter_any():
                        acc.feed_bytes(chunk, loop.time())
                    acc.flush(loop.time())
                else:
                    raw = await resp.read()
                    acc.feed_object(parse_json(raw), loop.time())
                return acc.result(loop.time(), streamed)
        except RequestFailed:
            raise
        except Exception as e:
            error = _ERRORS.error(
                e, self.options, answered=got_response, written_whole=upload.whole
            )
            if error is None:
                raise
            raise error from None
