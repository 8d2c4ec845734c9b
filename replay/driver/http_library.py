"""What the two transports built on a client library (aiohttp, httpx) share around the library.

Both build the body with the shared encoder, hand it to the library as tracked pieces, resend once
on a stale connection and map the library's exceptions through their `ErrorMap`; only opening
the client and reading the response are the library's own (`_exchange`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from replay.driver.http_common import (
    COMPLETIONS_PATH,
    HttpOptions,
    PromptEncoder,
    ReadyBodies,
    build_body,
)
from replay.driver.http_errors import ErrorMap, StaleConnection, TrackedBody, resend_once
from replay.driver.sse import SseAccumulator, parse_json
from replay.errors import RequestFailed
from replay.protocol import CompletionRequest, CompletionResult

__all__ = ["LibraryTransport", "Exchange", "prewarm"]

_HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}


class Exchange:
    """One request's state while the library sends it and reads the reply: the upload (how far
    it got), whether a response had begun, and the response parsed so far."""

    def __init__(self, body: bytes) -> None:
        self.upload = TrackedBody(body)
        self.headers = {**_HEADERS, "Content-Length": str(len(body))}
        self.acc = SseAccumulator()
        self.answered = False

    def whole_body(self, raw: bytes, now: float) -> None:
        """A plain JSON reply (not an event stream), read at `now`."""
        self.acc.feed_object(parse_json(raw), now)


class LibraryTransport:
    """The common part of `AiohttpTransport` and `HttpxTransport`; a subclass sets `_errors` and
    gives `start`, `close`, `_started` and `_exchange`."""

    _errors: ErrorMap

    def __init__(self, options: HttpOptions, *, incremental: bool = True) -> None:
        self.options = options
        self._url = options.root + COMPLETIONS_PATH
        self._encoder = PromptEncoder() if incremental else None
        self._bodies = ReadyBodies(self._body)

    def prepare(self, request: CompletionRequest) -> None:
        """Build the request body now, for `complete` to only send it."""
        self._bodies.prepare(request)

    def _body(self, request: CompletionRequest) -> bytes:
        parts = self._encoder.encode(request.task, request.prompt) if self._encoder else None
        return build_body(self.options.model, request, parts)

    def _started(self) -> bool:
        raise NotImplementedError

    async def _exchange(self, ex: Exchange) -> CompletionResult:
        """Send `ex`'s upload and read the reply into `ex.acc`, setting `ex.answered` as soon as
        a response begins; library exceptions are left to `_post` to map."""
        raise NotImplementedError

    async def complete(self, request: CompletionRequest) -> CompletionResult:
        if not self._started():
            raise RuntimeError(f"{type(self).__name__}.complete() before start()")
        body = self._bodies.take(request)
        try:
            return await self._post(body)
        except StaleConnection:
            return await resend_once(self._post, body)

    async def _post(self, body: bytes) -> CompletionResult:
        ex = Exchange(body)
        try:
            return await self._exchange(ex)
        except RequestFailed:
            raise
        except Exception as e:
            error = self._errors.error(
                e, self.options, answered=ex.answered, written_whole=ex.upload.whole
            )
            if error is None:
                raise
            raise error from None


async def prewarm(one: Callable[[], Awaitable[None]], n: int, timeout_s: float) -> None:
    """Run `n` copies of `one` (each opens a keep-alive connection) for at most `timeout_s`."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(*(one() for _ in range(n))), timeout_s)
