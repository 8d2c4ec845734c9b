"""One keep-alive HTTP/1.1 connection of the raw transport: the request written, the response parsed.

`RawConnection` is an asyncio protocol and, at once, the target of httptools' C parser callbacks:
the request goes out as its header bytes and body parts without a join (one `sendmsg` where the
selector transport would join them), and the response (Content-Length, chunked, or read to close)
is fed straight to `SseAccumulator`. Whether a lost connection may be resent is decided here, from
what reached the kernel and what came back. The pool that owns connections and the transport that
builds requests are in `replay.driver.http_raw`.
"""

from __future__ import annotations

import asyncio
import socket
from typing import TYPE_CHECKING

import httptools

from replay.driver.http_errors import (
    StaleConnection,
    bad_response,
    cut_off,
    http_status_error,
    lost,
    timed_out,
)
from replay.driver.sse import SseAccumulator, parse_json
from replay.errors import RequestFailed

if TYPE_CHECKING:
    from replay.driver.http_raw_pool import RawConnectionPool

__all__ = ["RawConnection"]

_PEEK_FLAGS = socket.MSG_PEEK | socket.MSG_DONTWAIT
_SENDMSG = hasattr(socket.socket, "sendmsg")  # not on Windows
_MAX_PARTS = 512  # well under IOV_MAX (1024); PromptEncoder keeps prompts to ~256 parts


def _rest(chunks: list, sent_bytes: int) -> list:
    """What is left of `chunks` after the first `sent_bytes` bytes."""
    for i, c in enumerate(chunks):
        n = len(c)
        if sent_bytes < n:
            return [memoryview(c)[sent_bytes:], *chunks[i + 1 :]]
        sent_bytes -= n
    return []


class RawConnection(asyncio.Protocol):
    """One keep-alive connection, one request at a time; also the httptools callback target.

    `exchange()` writes a request and returns when its response is complete (the result of
    `finish`) or raises `RequestFailed`. Afterwards `reusable` says whether the pool may keep it.
    """

    def __init__(self, pool: RawConnectionPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self.in_idle = False
        self.idle_since_s = 0.0
        self.answered = 0  # responses completed on this connection (a warm-up GET counts)
        self._fut: asyncio.Future | None = None
        self._parser: httptools.HttpResponseParser | None = None
        self._acc: SseAccumulator | None = None
        self._reset()

    def _reset(self) -> None:
        self._status = 0
        self._streamed = False
        self._has_length = False  # Content-Length or chunked; else the body ends at close
        self._keep_alive = True
        self._headers_done = False
        self._complete = False
        self._got_bytes = False
        self._written_all = False
        self._body: list[bytes] = []

    # --- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport
        sock = transport.get_extra_info("socket")
        # asyncio's TransportSocket wraps the real socket; uvloop's stand-in has only the fd
        self._sock: socket.socket | None = getattr(sock, "_sock", None)
        self._fd: int = sock.fileno() if sock is not None else -1
        # Any bytes left in the transport's buffer pause us, and resume_writing comes when the
        # buffer is empty again: the one sign that the whole request reached the kernel, which
        # decides whether a lost connection may be resent (_lost_error). We write one request
        # at a time, so there is nothing to throttle on pause.
        transport.set_write_buffer_limits(high=0, low=0)

    def data_received(self, data: bytes) -> None:
        if self._fut is None or self._fut.done():
            # bytes nobody asked for (or after a failed exchange): the stream is out of step
            self.abort()
            return
        self._got_bytes = True
        self._written_all = True  # the server answers: it had our request (or refused it)
        try:
            self._parser.feed_data(data)  # type: ignore[union-attr]
        except httptools.HttpParserCallbackError as e:
            cause = e.__context__
            if isinstance(cause, RequestFailed):
                self._fail(cause)
            else:
                self._fail(bad_response(repr(cause or e)))
        except httptools.HttpParserError as e:
            self._fail(bad_response(repr(e)))

    def resume_writing(self) -> None:
        self._written_all = True

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        fut = self._fut
        if fut is not None and not fut.done():
            if self._headers_done and not self._has_length and not self._complete:
                self._keep_alive = False
                self.on_message_complete()  # a body delimited by the close is now whole
            else:
                fut.set_exception(self._lost_error(exc))
        self.pool._connection_lost(self)

    def _lost_error(self, exc: Exception | None) -> BaseException:
        # A kept-alive connection that the server closes cleanly (FIN, no error) before a byte of
        # the answer is one it was retiring as our request crossed the close (llama.cpp did this
        # about once in 400 calls, with the whole request already in the kernel): a server that
        # had read the request would answer it, and one that died resets or refuses the resend.
        retired = exc is None and self.answered > 0
        if not self._got_bytes and (not self._written_all or retired):
            return StaleConnection(repr(exc) if exc else "closed by peer")
        why = repr(exc) if exc else "closed by the server"
        if self._got_bytes:
            return cut_off(why)
        return lost(why)

    # --- httptools callbacks -----------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-type":
            self._streamed = value.lower().startswith(b"text/event-stream")
        elif name == b"content-length" or name == b"transfer-encoding":
            self._has_length = True

    def on_headers_complete(self) -> None:
        self._headers_done = True
        self._status = self._parser.get_status_code()  # type: ignore[union-attr]
        self._keep_alive = self._parser.should_keep_alive()  # type: ignore[union-attr]
        if not 200 <= self._status < 300 or self._acc is None:
            self._streamed = False

    def on_body(self, body: bytes) -> None:
        if self._streamed:
            self._acc.feed_bytes(body, self.pool.loop.time())  # type: ignore[union-attr]
        else:
            self._body.append(body)

    def on_message_complete(self) -> None:
        self._complete = True
        self.answered += 1
        # The server's keep-alive clock starts when it has sent the response, not when the pool
        # gets the connection back: a caller that holds a connection after its answer (prewarm
        # waits for all of its connections) must not make it look younger than the server sees.
        self.idle_since_s = self.pool.loop.time()
        self._keep_alive = self._keep_alive and self._parser.should_keep_alive()  # type: ignore[union-attr]
        fut = self._fut
        if fut is None or fut.done():
            return
        try:
            fut.set_result(self._finish())
        except RequestFailed as e:
            fut.set_exception(e)

    def _finish(self):
        now = self.pool.loop.time()
        body = b"".join(self._body)
        if not 200 <= self._status < 300:
            raise http_status_error(self._status, body)
        acc = self._acc
        if acc is None:
            return body
        if self._streamed:
            acc.flush(now)
            return acc.result(now, True)
        acc.feed_object(parse_json(body), now)
        return acc.result(now, False)

    # --- one exchange --------------------------------------------------------------------------

    async def exchange(self, chunks: list, acc: SseAccumulator | None, deadline_s: float):
        """Write `chunks` as one request and wait for the whole response (result of `_finish`)."""
        return await self.finish(self.begin(chunks, acc, deadline_s))

    def begin(
        self, chunks: list, acc: SseAccumulator | None, deadline_s: float
    ) -> tuple[asyncio.Future, asyncio.TimerHandle]:
        """Write `chunks` as one request now, without waiting: the response is read from here
        on, and `finish` (which must follow, or `abort`) waits for it. Raises `StaleConnection`
        if the connection is already lost."""
        self.write_request(chunks)
        return self.arm(acc, deadline_s)

    def write_request(self, chunks: list) -> None:
        """`begin`'s first half: write `chunks` as one request. `arm` must follow in the same
        loop callback: no response byte is delivered before the callback returns, so arming
        after the write loses nothing, and the writes of a burst go out back to back (a byte
        that came before `arm` would still drop the connection, as any unasked byte does).
        Raises `StaleConnection` if the connection is already lost (nothing written)."""
        if self.lost:
            raise StaleConnection("closed before the request was written")
        transport = self.transport
        assert transport is not None
        self._reset()
        self._write(transport, chunks)
        # a write that failed leaves an empty buffer too, but a closing transport
        if not transport.is_closing() and transport.get_write_buffer_size() == 0:
            self._written_all = True

    def arm(
        self, acc: SseAccumulator | None, deadline_s: float
    ) -> tuple[asyncio.Future, asyncio.TimerHandle]:
        """`begin`'s second half: read the response of the request `write_request` wrote."""
        loop = self.pool.loop
        self._acc = acc
        self._parser = httptools.HttpResponseParser(self)
        fut = self._fut = loop.create_future()
        return fut, loop.call_at(deadline_s, self._timed_out)

    async def finish(self, begun: tuple[asyncio.Future, asyncio.TimerHandle]):
        """Wait for the response of the request `begin` wrote (result of `_finish`)."""
        fut, timer = begun
        try:
            return await fut
        finally:
            self._end(timer)

    def drop(self, begun: tuple[asyncio.Future, asyncio.TimerHandle]) -> None:
        """Give up on the request `begin` wrote, unanswered: nobody will `finish` it. The
        connection is closed, so the server drops the request with it."""
        fut, timer = begun
        self._end(timer)
        if fut.done():
            if not fut.cancelled():
                fut.exception()  # retrieved: it has no reader now
        else:
            fut.cancel()
        self.abort()

    def _end(self, timer: asyncio.TimerHandle) -> None:
        timer.cancel()
        self._fut = None
        self._acc = None

    def write_ahead(self, chunks: list) -> None:
        """Write the first bytes of the next request now; `exchange` writes the rest. Bytes the
        server sends back before then fail nothing yet: `data_received` drops the connection,
        and `exchange` finds it lost (`StaleConnection`: the request never ended there)."""
        transport = self.transport
        if transport is not None and not self.lost and not transport.is_closing():
            self._write(transport, chunks)

    def _write(self, transport: asyncio.Transport, chunks: list) -> None:
        """Hand the request to the kernel without joining its parts where that pays, and so that
        bytes the kernel does not take at once pause the protocol.

        With the transport's buffer empty, one `sendmsg` of the parts writes them as they are
        (Python 3.11's `writelines` is a join and a write: for a 100K-token prompt, a 0.6 MB copy
        per call, ~7% of the client's CPU per call). What the kernel does not take goes to the
        transport's `write`, which pauses the protocol until it has drained: `resume_writing`
        is how this connection learns that the whole request reached the kernel. It is not
        `writelines`: from Python 3.12 the selector transport's `writelines` buffers the rest
        without pausing the protocol (3.12.1 and 3.13.0: selector_events.py), so no
        `resume_writing` came, and a request written whole looked unwritten when the server then
        closed (`_lost_error`) and was sent twice. TLS and uvloop (no socket object) keep
        `writelines`: their transports pause the protocol themselves.
        """
        sock = self._sock
        if sock is None or self.pool.ssl is not None:
            transport.writelines(chunks)
            return
        if (
            _SENDMSG
            and 1 < len(chunks) <= _MAX_PARTS
            and not transport.get_write_buffer_size()
            and not transport.is_closing()
        ):
            try:
                sent = sock.sendmsg(chunks)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                sent = 0  # the transport's write below fails the same way and reports it
            if sent:
                chunks = _rest(chunks, sent)
                if not chunks:
                    return
        transport.write(chunks[0] if len(chunks) == 1 else b"".join(chunks))

    def _timed_out(self) -> None:
        self._fail(timed_out(self.pool.request_timeout_s))

    def _fail(self, error: RequestFailed) -> None:
        """Fail the exchange in flight and drop the connection (its stream is out of step)."""
        fut = self._fut
        if fut is not None and not fut.done():
            fut.set_exception(error)
        self.abort()

    @property
    def reusable(self) -> bool:
        # a server may answer (an early error) before it has read all of a request: the rest
        # of the body would then be read as the next request, so such a connection is retired
        return (
            self._complete
            and self._keep_alive
            and not self.lost
            and self.transport is not None
            and not self.transport.get_write_buffer_size()
        )

    def peer_closed(self) -> bool:
        """Whether the server has closed (or reset) this idle connection, looking at the socket
        itself: the loop learns of a close only at its next poll, and a request written into a
        connection the server already closed is lost. One non-blocking peek, ~1 us."""
        if self.lost or self.transport is None or self.transport.is_closing():
            return True
        if self.pool.ssl is not None:
            return False  # a peek would see TLS records, not the HTTP stream
        try:
            if self._sock is not None:
                self._sock.recv(1, _PEEK_FLAGS)
            else:
                s = socket.socket(fileno=self._fd)
                try:
                    s.recv(1, _PEEK_FLAGS)
                finally:
                    s.detach()
        except (BlockingIOError, InterruptedError):
            return False  # nothing to read: open and quiet, as an idle connection should be
        except OSError:
            return True
        return True  # end of stream, or bytes nobody asked for: either way not reusable

    def abort(self) -> None:
        self._keep_alive = False
        if self.transport is not None and not self.lost:
            self.transport.abort()
