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

__all__ = ["HttpxTransport"]

_HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}
# httpx's exceptions, most specific first (ConnectTimeout is a TimeoutException)
_ERRORS = ErrorMap(
    (
        (httpx.ConnectTimeout, "connect_timeout"),
        (httpx.ConnectError, "connect"),
        ((TimeoutError, httpx.TimeoutException), "timeout"),
        ((httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError), "lost"),
        (httpx.DecodingError, "malformed"),
        (httpx.HTTPError, "other"),
    )
)


class HttpxTransport:
    """Sends /v1/completions over one `httpx.AsyncClient` with orjson bodies."""

    name = "httpx"

    def __init__(self, options: HttpOptions, *, incremental: bool = True) -> None:
        self.options = options
        self._url = options.root + COMPLETIONS_PATH
        self._encoder = PromptEncoder() if incremental else None
        self._bodies = ReadyBodies(self._body)
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
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def complete(self, request: CompletionRequest) -> CompletionResult:
        if self._client is None:
            raise RuntimeError("HttpxTransport.complete() before start()")
        body = self._bodies.take(request)
        try:
            return await self._post(body)
        except StaleConnection:
            return await resend_once(self._post, body)

    async def _post(self, body: bytes) -> CompletionResult:
        assert self._client is not None
        loop = asyncio.get_running_loop()
        acc = SseAccumulator()
        got_response = False
        upload = TrackedBody(body)
        # an explicit length keeps the iterable body out of chunked encoding
        headers = {**_HEADERS, "Content-Length": str(len(body))}
        try:
            # httpx's timeouts are per read; the whole-request limit is the option's meaning
            async with asyncio.timeout(self.options.request_timeout_s):
                # memoryview pieces (no copy of the body): h11 joins what it sends as bytes-likes
                content = cast(AsyncIterable[bytes], upload.chunks())
                async with self._client.stream(
                    "POST", self._url, content=content, headers=headers
                ) as resp:
                    got_response = True
                    if resp.status_code >= 400:
                        raise http_status_error(resp.status_code, await resp.aread())
                    ctype = resp.headers.get("content-type", "")
                    streamed = ctype.startswith("text/event-stream")
                    if streamed:
                        async for chunk in resp.aiter_raw():
                            acc.feed_bytes(chunk, loop.time())
                        acc.flush(loop.time())
                    else:
                        acc.feed_object(parse_json(await resp.aread()), loop.time())
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
