"""HTTP transport on httpx (the project card's library; also used for control-plane calls).

Same requests and error classes as the aiohttp transport. Not the default: httpcore 1.0.x re-scans
its whole connection pool on every request start and finish, which at hundreds of connections makes
the client, not the server, shape the send times (docs/driver.md has the numbers).
"""

from __future__ import annotations

import asyncio
import contextlib

import httpx

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

__all__ = ["HttpxTransport"]

_HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}


class HttpxTransport:
    """Sends /v1/completions over one `httpx.AsyncClient` with orjson bodies."""

    name = "httpx"

    def __init__(self, options: HttpOptions, *, incremental: bool = True) -> None:
        self.options = options
        self._url = options.root + COMPLETIONS_PATH
        self._encoder = PromptEncoder() if incremental else None
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

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def complete(self, request: CompletionRequest) -> CompletionResult:
        if self._client is None:
            raise RuntimeError("HttpxTransport.complete() before start()")
        parts = self._encoder.encode(request.task, request.prompt) if self._encoder else None
        body = build_body(self.options.model, request, parts)
        loop = asyncio.get_running_loop()
        acc = SseAccumulator()
        try:
            # httpx's timeouts are per read; the whole-request limit is the option's meaning
            async with asyncio.timeout(self.options.request_timeout_s):
                async with self._client.stream(
                    "POST", self._url, content=body, headers=_HEADERS
                ) as resp:
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
        except httpx.ConnectError as e:
            if _is_refused(e):
                raise refused(self._url, str(e)) from None
            raise RequestFailed(
                ErrorKind.CONNECTION, f"cannot connect to {self._url}: {e}"
            ) from None
        except (TimeoutError, httpx.TimeoutException):
            raise RequestFailed(
                ErrorKind.TIMEOUT,
                f"no complete response within {self.options.request_timeout_s:g} s",
            ) from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as e:
            raise RequestFailed(ErrorKind.CONNECTION, f"connection lost: {e!r}") from None
        except httpx.DecodingError as e:
            raise RequestFailed(ErrorKind.MALFORMED, f"undecodable response: {e}") from None
        except httpx.HTTPError as e:
            raise RequestFailed(ErrorKind.CONNECTION, f"{type(e).__name__}: {e}") from None


def _is_refused(e: BaseException) -> bool:
    seen = 0
    cur: BaseException | None = e
    while cur is not None and seen < 8:
        if isinstance(cur, ConnectionRefusedError):
            return True
        cur = cur.__cause__ or cur.__context__
        seen += 1
    return "refused" in str(e).lower() or "errno 111" in str(e).lower()
