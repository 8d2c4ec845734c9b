"""HTTP transport on aiohttp: one session per run, keep-alive, connection limit = pool size.

At 1,024 agents it keeps send drift in the low milliseconds where httpx's connection pool does
not; the default is the raw transport, which spends less CPU per call (docs/driver.md). aiohttp errors are translated here into
`RequestFailed` kinds; nothing aiohttp-specific leaves this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import aiohttp

from replay.driver.http_common import (
    COMPLETIONS_PATH,
    MODELS_PATH,
    HttpOptions,
    PromptEncoder,
    SseAccumulator,
    build_body,
    http_status_error,
    parse_json,
    refused,
)
from replay.errors import ErrorKind, RequestFailed
from replay.protocol import CompletionRequest, CompletionResult

__all__ = ["AiohttpTransport"]

_HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}


class AiohttpTransport:
    """Sends /v1/completions over aiohttp with orjson bodies and incremental prompt encoding."""

    name = "aiohttp"

    def __init__(self, options: HttpOptions, *, incremental: bool = True) -> None:
        self.options = options
        self._url = options.root + COMPLETIONS_PATH
        self._encoder = PromptEncoder() if incremental else None
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

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def complete(self, request: CompletionRequest) -> CompletionResult:
        if self._session is None:
            raise RuntimeError("AiohttpTransport.complete() before start()")
        parts = self._encoder.encode(request.task, request.prompt) if self._encoder else None
        body = build_body(self.options.model, request, parts)
        try:
            return await self._post(body)
        except _StaleConnection:
            # The server closed a kept-alive connection as we reused it (cpp-httplib and others
            # close idle or well-used connections): it never got this request, so sending it
            # once more on a fresh connection cannot double the server's work.
            try:
                result = await self._post(body)
            except _StaleConnection as e:
                raise RequestFailed(
                    ErrorKind.CONNECTION, f"connection lost: {e.__cause__!r}"
                ) from None
            result.extra["stale_connection_retries"] = 1
            return result

    async def _post(self, body: bytes) -> CompletionResult:
        assert self._session is not None
        loop = asyncio.get_running_loop()
        acc = SseAccumulator()
        got_response = False
        upload = _Upload(body)
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
        except aiohttp.ClientConnectorError as e:
            if isinstance(e.os_error, ConnectionRefusedError):
                raise refused(self._url, str(e.os_error)) from None
            raise RequestFailed(
                ErrorKind.CONNECTION, f"cannot connect to {self._url}: {e}"
            ) from None
        except (TimeoutError, aiohttp.ServerTimeoutError):
            raise RequestFailed(
                ErrorKind.TIMEOUT,
                f"no complete response within {self.options.request_timeout_s:g} s",
            ) from None
        except aiohttp.ClientPayloadError as e:
            raise RequestFailed(ErrorKind.CONNECTION, f"response body cut off: {e}") from None
        except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError, ConnectionError) as e:
            if not got_response and not upload.done:
                raise _StaleConnection() from e
            raise RequestFailed(ErrorKind.CONNECTION, f"connection lost: {e!r}") from None
        except aiohttp.ClientResponseError as e:
            raise RequestFailed(ErrorKind.MALFORMED, f"bad HTTP response: {e}") from None
        except aiohttp.ClientError as e:
            raise RequestFailed(ErrorKind.CONNECTION, f"{type(e).__name__}: {e}") from None


class _StaleConnection(Exception):
    """The connection died before the whole request body was written and before any response:
    the server cannot have acted on a request it never read to the end."""


class _Upload:
    """The request body as an async iterable, so that the transport knows how far aiohttp got:
    it asks for the next piece only after writing the previous one. The last byte goes out alone,
    after `done` is set: while `done` is false the server cannot have read the whole request
    (Content-Length framing), so it cannot have acted on it, and a resend is safe."""

    _PIECE_BYTES = 1 << 20

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.done = False

    async def chunks(self) -> AsyncIterator[memoryview]:
        view = memoryview(self.body)
        last = len(view) - 1
        for i in range(0, last, self._PIECE_BYTES):
            yield view[i : min(i + self._PIECE_BYTES, last)]
        self.done = True
        yield view[last:]
