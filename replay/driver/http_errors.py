"""How the HTTP transports fail alike: one error map from each library's exceptions onto the
project's kinds and words, and the rule for sending a request once more on a stale connection.
"""

from __future__ import annotations

import errno
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from replay.driver.http_common import HttpOptions
from replay.errors import ErrorKind, RequestFailed
from replay.protocol import CompletionResult, ConnectionRefused

__all__ = [
    "http_status_error",
    "refused",
    "ErrorMap",
    "StaleConnection",
    "TrackedBody",
    "resend_once",
    "timed_out",
    "bad_response",
    "lost",
    "cut_off",
]


def http_status_error(status: int, body: bytes) -> RequestFailed:
    """A status outside 2xx -> `http_4xx`/`http_5xx` with the server's message (shortened). A
    redirect is the request's fault (`http_4xx`): no transport follows one, since the URL given
    is where the replay measures."""
    if 300 <= status < 400:
        return RequestFailed(
            ErrorKind.HTTP_4XX,
            f"HTTP {status}: a redirect, which replay does not follow: give --url the server's "
            "own address",
            status=status,
        )
    kind = ErrorKind.of_http_status(status)
    text = body[:300].decode("utf-8", "replace").strip()
    return RequestFailed(
        kind, f"HTTP {status}: {text}" if text else f"HTTP {status}", status=status
    )


def refused(url: str, why: str) -> ConnectionRefused:
    return ConnectionRefused(f"connection refused by {url} ({why}); is the server running?")


# --- one error map for every transport ---------------------------------------------------------
#
# Each transport lists its library's exceptions against what happened (first match wins, as in
# httpx's table of httpcore exceptions); `ErrorMap.error` turns what happened into the one
# `RequestFailed` kind and wording every transport records, so a fault reads the same whatever
# client sent the request (the library's own words follow in parentheses). What happened:
#   connect          no connection could be opened (refused, when the server refused it)
#   connect_timeout  no connection within the connect timeout
#   timeout          no complete response within the request timeout
#   lost             the connection died (resent once when the server cannot have had the request)
#   cut              the response body ended early
#   malformed        the bytes were not a valid HTTP response
#   tls              the TLS handshake failed
#   other            any other error of the library
_WHAT = ("connect", "connect_timeout", "timeout", "lost", "cut", "malformed", "tls", "other")


class StaleConnection(Exception):
    """The connection died before the whole request was written and before any response: the
    server cannot have acted on a request it never read to the end, so it may be sent again."""


_Types = type[BaseException] | tuple[type[BaseException], ...]
_What = str | Callable[[BaseException], str]


class ErrorMap:
    """A transport's exception table: `(exception types, what happened)` pairs, first match wins;
    what happened is a name, or a function of the exception where one type covers two cases.
    A `connect` failure whose cause is an `ssl.SSLError` is `tls`, in every transport."""

    def __init__(self, table: tuple[tuple[_Types, _What], ...]) -> None:
        bad = [what for _, what in table if isinstance(what, str) and what not in _WHAT]
        if bad:
            raise ValueError(f"unknown error classes {bad}; valid: {_WHAT}")
        self.table = table

    def error(
        self,
        exc: BaseException,
        options: HttpOptions,
        *,
        answered: bool = False,
        written_whole: bool = True,
        connect_timeout_s: float | None = None,
    ) -> BaseException | None:
        """The exception to raise for `exc`, or None when the table does not know it (a bug, not
        a fault: the caller lets it propagate).

        `answered`: a response had begun; `written_whole`: the whole request had been handed to
        the kernel. A lost connection with neither becomes `StaleConnection` (see `resend_once`).
        `connect_timeout_s`: the connect wait actually allowed, when less than the option's.
        """
        what = next((w for types, w in self.table if isinstance(exc, types)), None)
        if what is None:
            return None
        if not isinstance(what, str):
            what = what(exc)
        if what == "connect" and _caused_by(exc, ssl.SSLError):
            what = "tls"
        detail = repr(exc)
        url = options.root
        if what == "connect":
            if _is_refused(exc):
                return refused(url, str(exc) or detail)
            return RequestFailed(ErrorKind.CONNECTION, f"cannot connect to {url} ({detail})")
        if what == "connect_timeout":
            wait_s = options.connect_timeout_s if connect_timeout_s is None else connect_timeout_s
            return RequestFailed(
                ErrorKind.TIMEOUT, f"could not connect to {url} within {wait_s:g} s"
            )
        if what == "timeout":
            return timed_out(options.request_timeout_s)
        if what == "cut" or (what == "lost" and answered):
            return cut_off(detail)
        if what == "lost":
            return lost(detail) if written_whole else StaleConnection(detail)
        if what == "malformed":
            return bad_response(detail)
        if what == "tls":
            return RequestFailed(
                ErrorKind.CONNECTION, f"TLS handshake with {url} failed ({detail})"
            )
        return RequestFailed(ErrorKind.CONNECTION, f"client error ({detail})")


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    """Whether `exc` or an exception it was raised from (or during) is a `kind`."""
    seen = 0
    cur: BaseException | None = exc
    while cur is not None and seen < 16:
        if isinstance(cur, kind):
            return True
        cur = cur.__cause__ or cur.__context__
        seen += 1
    return False


def timed_out(request_timeout_s: float) -> RequestFailed:
    return RequestFailed(ErrorKind.TIMEOUT, f"no complete response within {request_timeout_s:g} s")


def bad_response(detail: str) -> RequestFailed:
    return RequestFailed(ErrorKind.MALFORMED, f"bad HTTP response ({detail})")


def lost(detail: str) -> RequestFailed:
    """The connection died after the whole request was sent and before any response."""
    return RequestFailed(ErrorKind.CONNECTION, f"connection lost: no response ({detail})")


def cut_off(detail: str) -> RequestFailed:
    """The connection died while the response was coming."""
    return RequestFailed(ErrorKind.CONNECTION, f"connection lost: response cut off ({detail})")


def _is_refused(exc: BaseException) -> bool:
    """Whether a connection refusal is anywhere in `exc`'s chain (libraries wrap the OSError)."""
    cur: BaseException | None = exc
    for _ in range(8):
        if cur is None:
            break
        if (
            isinstance(cur, ConnectionRefusedError)
            or getattr(cur, "errno", None) == errno.ECONNREFUSED
        ):
            return True
        cur = cur.__cause__ or cur.__context__
    # anyio reports every address it tried in one message ("All connection attempts failed")
    text = str(exc).lower()
    return "refused" in text or f"errno {errno.ECONNREFUSED}" in text


# --- the resend rule ---------------------------------------------------------------------------


async def resend_once(
    send: Callable[..., Awaitable[CompletionResult]], *args: Any
) -> CompletionResult:
    """Send a request once more after `StaleConnection`, and mark the result as resent.

    The server closed the connection before it had the whole request (a kept-alive connection
    it closed just as we reused it, or a write that hit its reset): a server acts on a completion
    request only once it has read the whole body, so this one never ran, and sending it once more
    on a fresh connection cannot double its work. A second stale connection is a failure.
    Called only from the transports' `except StaleConnection`, so the common path pays nothing.
    """
    try:
        result = await send(*args)
    except StaleConnection as e:
        raise lost(str(e)) from None
    result.extra["stale_connection_retries"] = 1
    return result


class TrackedBody:
    """A request body as an async iterable, so that a transport that hands the body to a client
    library knows how far the library got: it asks for the next piece only after writing the
    previous one. The last byte goes out alone, after `whole` is set: while `whole` is false the
    server cannot have read the whole request (Content-Length framing), so it cannot have acted
    on it, and a resend is safe."""

    _PIECE_BYTES = 1 << 20

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.whole = False

    async def chunks(self) -> AsyncIterator[memoryview]:
        view = memoryview(self.body)
        last = len(view) - 1
        for i in range(0, last, self._PIECE_BYTES):
            yield view[i : min(i + self._PIECE_BYTES, last)]
        self.whole = True
        yield view[last:]
