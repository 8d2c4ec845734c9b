"""Small real loopback servers for driver tests that the simulator cannot play.

`FaultServer` speaks enough of the OpenAI completions API (HTTP/1.1 keep-alive, SSE with usage,
/v1/models, /health) to be replayed against, and injects faults on chosen requests: HTTP errors,
hangs (client timeouts), connection resets, cut streams, malformed bodies, wrong usage counts. It
runs on its own event loop in a background thread, bound to 127.0.0.1 port 0, so tests can drive it
from a client on another loop or from a `replay run` subprocess.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

import orjson

FAULTS = (
    "http_400",
    "http_500",
    "http_503",
    "hang",  # accept and never answer: the client times out
    "reset",  # read the request, then close with RST
    "cut",  # start the stream, then close mid-way
    "malformed_json",  # 200 + an SSE event that is not JSON
    "malformed_shape",  # 200 + JSON that is not a completion
    "usage_off",  # usage.prompt_tokens and completion_tokens off by one
    "no_stream",  # plain JSON response (no SSE)
)


@dataclass
class Seen:
    """One request as the server saw it (monotonic clock of this process)."""

    user: str
    index: int  # n-th request of this user (0-based)
    prompt_len: int
    max_tokens: int
    body: dict
    t_recv: float
    t_done: float | None = None


async def _read_head(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str]]:
    """A request's method, path and headers (names lower-cased)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return method, path, headers


class _LoopThread:
    """Serves `self._handle` on 127.0.0.1 from an asyncio loop in a daemon thread; subclasses
    provide `_handle` and `_shutdown` (run on that loop before it stops)."""

    _backlog = 256
    _loop: asyncio.AbstractEventLoop | None
    _server: asyncio.AbstractServer | None
    _thread: threading.Thread | None
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _start_thread(self, what: str) -> None:
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError(f"{what} did not start")

    def _stop_thread(self) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def _on_loop(self) -> None:
        """Called on the new loop before the server starts (loop-bound state goes here)."""

    def _run(self, ready: threading.Event) -> None:
        loop = self._loop = asyncio.new_event_loop()
        self._on_loop()
        port = getattr(self, "bind_port", 0)
        self._server = loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", port, backlog=self._backlog)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    async def _shutdown(self) -> None:
        raise NotImplementedError


@dataclass
class FaultServer(_LoopThread):
    """OpenAI-compatible test server; `faults[(user, n)]` names the fault of that request."""

    faults: dict[tuple[str, int], str] = field(default_factory=dict)
    ttft_s: float = 0.0  # delay before the first token
    decode_s: float = 0.0  # delay between first token and end
    model: str = "fault-model"
    cached_tokens: int | None = 0  # reported usage.prompt_tokens_details.cached_tokens
    stop_after: int | None = None  # after this many requests, close everything (server gone)
    bind_port: int = 0  # 0: any free port
    prompt_tokens_offset: int = 0  # added to every reported usage.prompt_tokens
    send_usage: bool = True  # False: responses carry no `usage` at all
    models_status: int = 200  # status of GET /v1/models (an error body when not 200)
    seen: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        bad = {f for f in self.faults.values() if f not in FAULTS}
        if bad:
            raise ValueError(f"unknown faults {bad}; valid: {FAULTS}")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task] = set()
        self._closing: asyncio.Event | None = None
        self._counts: dict[str, int] = {}
        self.port = 0

    _backlog = 1024

    # --- lifecycle (called from the test thread) -------------------------------------------

    def start(self) -> FaultServer:
        self._start_thread("fault server")
        return self

    def stop(self) -> None:
        self._stop_thread()

    def __enter__(self) -> FaultServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _on_loop(self) -> None:
        self._closing = asyncio.Event()

    def close_listener(self) -> None:
        """Stop accepting connections (later connects are refused); call on the server's loop."""
        if self._server is not None:
            self._server.close()
            self._server = None

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        assert self._closing is not None
        self._closing.set()  # wakes hanging requests
        for w in list(self._writers):
            _abort(w)
        self._writers.clear()
        # handlers end on their own once their sockets are gone (cancelling them trips a
        # Python 3.11 asyncio.streams logging bug)
        await asyncio.gather(*self._handlers, return_exceptions=True)

    # --- protocol --------------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        self._handlers.add(asyncio.current_task())  # type: ignore[arg-type]
        try:
            while True:
                method, path, headers = await _read_head(reader)
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if not await self._respond(method, path, body, writer):
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            self._handlers.discard(asyncio.current_task())  # type: ignore[arg-type]
            self._writers.discard(writer)
            if not writer.is_closing():
                writer.close()

    async def _pause(self, dt_s: float) -> bool:
        """Sleep `dt_s`; True when the server is shutting down meanwhile."""
        assert self._closing is not None
        if dt_s > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), dt_s)
        return self._closing.is_set()

    async def _respond(self, method: str, path: str, body: bytes, w: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection must not be reused."""
        if path == "/v1/models" and method == "GET" and self.models_status != 200:
            _send_json(w, self.models_status, {"error": {"message": "models unavailable"}})
            await w.drain()
            return True
        if path in ("/health", "/v1/models") and method == "GET":
            data = {"object": "list", "data": [{"id": self.model, "object": "model"}]}
            _send_json(w, 200, data if path == "/v1/models" else {"ok": True})
            await w.drain()
            return True
        if path != "/v1/completions" or method != "POST":
            _send_json(w, 404, {"error": {"message": f"no route {method} {path}"}})
            await w.drain()
            return True
        req = orjson.loads(body)
        user = str(req.get("user", ""))
        idx = self._counts.get(user, 0)
        self._counts[user] = idx + 1
        seen = Seen(user, idx, len(req["prompt"]), int(req["max_tokens"]), req, time.monotonic())
        self.seen.append(seen)
        if self.stop_after is not None and len(self.seen) > self.stop_after:
            self.close_listener()
            for other in list(self._writers):
                _abort(other)
            return False
        fault = self.faults.get((user, idx))
        if fault in ("http_400", "http_500", "http_503"):
            status = int(fault[5:])
            _send_json(w, status, {"error": {"message": f"injected {fault}"}})
            await w.drain()
            return True
        if fault == "hang":
            assert self._closing is not None
            await self._closing.wait()
            return False
        if fault == "reset":
            _abort(w)
            return False
        if await self._pause(self.ttft_s):
            return False
        n_prompt, n_out = seen.prompt_len + self.prompt_tokens_offset, seen.max_tokens
        if fault == "usage_off":
            n_prompt, n_out = n_prompt + 1, n_out - 1
        usage = {"prompt_tokens": n_prompt, "completion_tokens": n_out}
        usage["total_tokens"] = n_prompt + n_out
        if self.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        if fault == "malformed_shape":
            _send_json(w, 200, ["not", "a", "completion"])
            await w.drain()
            return True
        if fault == "no_stream" or not req.get("stream"):
            text = "x" * n_out
            obj = {"choices": [{"index": 0, "text": text}], "usage": usage}
            if not self.send_usage:
                del obj["usage"]
            _send_json(w, 200, obj)
            seen.t_done = time.monotonic()
            await w.drain()
            return True
        w.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        if fault == "malformed_json":
            _chunk(w, b'data: {"choices": [tru\n\n')
            _chunk(w, b"")
            await w.drain()
            return True
        first = {"choices": [{"index": 0, "text": "x", "finish_reason": None}]}
        _chunk(w, b"data: " + orjson.dumps(first) + b"\n\n")
        await w.drain()
        if fault == "cut":
            _abort(w)
            return False
        if await self._pause(self.decode_s):
            return False
        rest = {
            "choices": [{"index": 0, "text": "x" * max(0, n_out - 1), "finish_reason": "length"}]
        }
        _chunk(w, b"data: " + orjson.dumps(rest) + b"\n\n")
        if req.get("stream_options", {}).get("include_usage") and self.send_usage:
            _chunk(w, b"data: " + orjson.dumps({"choices": [], "usage": usage}) + b"\n\n")
        _chunk(w, b"data: [DONE]\n\n")
        _chunk(w, b"")
        seen.t_done = time.monotonic()
        await w.drain()
        return True


def _send_json(w: asyncio.StreamWriter, status: int, obj) -> None:
    body = orjson.dumps(obj)
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 500: "Internal Server Error"}
    w.write(
        f"HTTP/1.1 {status} {reason.get(status, 'Error')}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n".encode()
        + body
    )


def _chunk(w: asyncio.StreamWriter, data: bytes) -> None:
    w.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")


def _abort(w: asyncio.StreamWriter) -> None:
    """Close with RST (SO_LINGER 0), as a crashed peer would."""
    sock = w.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    w.transport.abort()


def free_port() -> int:
    """A port nothing listens on (bound then released): connections to it are refused."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# --- small hand-built traces and an in-process transport for driver tests --------------------


def make_trace(tasks: dict, *, vocab_size: int = 1000, seed: int = 0, path: str | None = None):
    """A trace from {task: [call spec, ...]}; a spec is a dict with `gap`, `new` (appended tokens),
    `out` (output length) and optional `after`, `parent`, `at`, `tail`, `start` (recorded start_s).
    Each call keeps its task's whole previous context, as an agent's next turn does."""
    import numpy as np

    from replay.trace.model import Call, Trace, TraceHeader

    rng = np.random.default_rng(seed)
    calls = []
    for task, specs in tasks.items():
        ctx = 0
        for i, s in enumerate(specs):
            append = rng.integers(0, vocab_size, s.get("new", 8), dtype=np.int32)
            calls.append(
                Call(
                    task=task,
                    index=i,
                    gap_s=float(s.get("gap", 0.0)),
                    keep=ctx,
                    append=append,
                    prompt_len=ctx + len(append),
                    output_len=int(s.get("out", 4)),
                    after=tuple(s.get("after", ())),
                    at_s=s.get("at"),
                    tail_gap_s=s.get("tail"),
                    recorded={"start_s": s["start"]} if "start" in s else None,
                    parent=s.get("parent"),
                )
            )
            ctx += len(append) + int(s.get("out", 4))
    return Trace(TraceHeader(vocab_size=vocab_size), calls, path=path)


class ScriptedTransport:
    """In-process transport for virtual-time tests: service time and faults are functions of the
    request; it logs (task, call, t_start, t_end) and the peak number of requests in flight."""

    name = "scripted"

    def __init__(self, ttft_s=0.1, per_token_s=0.01, fail=None, report=None):
        self.ttft_s = ttft_s
        self.per_token_s = per_token_s
        self.fail = fail or {}  # (task, call) -> RequestFailed kind
        self.report = report  # request -> (prompt_tokens, completion_tokens) to report
        self.log: list[tuple[str, int, float, float]] = []
        self.requests = []
        self.inflight = 0
        self.peak_inflight = 0
        self.started = self.closed = False

    async def start(self) -> None:
        self.started = True

    async def close(self) -> None:
        self.closed = True

    async def complete(self, req):
        from replay.errors import RequestFailed
        from replay.protocol import CompletionResult

        loop = asyncio.get_running_loop()
        t0 = loop.time()
        self.requests.append(req)
        self.inflight += 1
        self.peak_inflight = max(self.peak_inflight, self.inflight)
        try:
            await asyncio.sleep(self.ttft_s)
            t1 = loop.time()
            await asyncio.sleep(self.per_token_s * req.max_tokens)
            kind = self.fail.get((req.task, req.call))
            if kind:
                raise RequestFailed(kind, "scripted failure")
            p, c = self.report(req) if self.report else (len(req.prompt), req.max_tokens)
            ids = req.forced_output.tolist() if req.forced_output is not None else None
            return CompletionResult(
                t_first_token=t1,
                t_end=loop.time(),
                prompt_tokens=p,
                completion_tokens=c,
                cached_tokens=0,
                output_ids=ids,
            )
        finally:
            self.inflight -= 1
            self.log.append((req.task, req.call, t0, loop.time()))


# --- a scriptable HTTP/1.1 server for connection-level tests ---------------------------------


@dataclass
class Exchange:
    """One request as `ScriptServer` saw it, and where to write its response."""

    conn_id: int  # which connection (0-based, in accept order)
    on_conn: int  # n-th request on that connection (0-based)
    index: int  # n-th request overall (0-based)
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    writer: asyncio.StreamWriter


def sse_body(prompt_tokens: int, completion_tokens: int, text: str = "x") -> bytes:
    """A complete OpenAI completions event stream with usage and [DONE]."""
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
    first = {"choices": [{"index": 0, "text": text, "finish_reason": "length"}]}
    return (
        b"data: " + orjson.dumps(first) + b"\n\n"
        b"data: " + orjson.dumps({"choices": [], "usage": usage}) + b"\n\ndata: [DONE]\n\n"
    )


class ScriptServer(_LoopThread):
    """HTTP/1.1 server on 127.0.0.1 port 0 (own thread and loop) whose answers are a script.

    `script(ex)` is a coroutine function on the server's loop: it writes whatever bytes it likes
    to `ex.writer` and returns True to keep reading requests from that connection, False to close
    it. The server counts connections (opened, open now, peak open at once) on its side, which is
    what connection-pool tests must check. `abort(conn_id)` resets a connection (RST) from the
    test thread and returns once the kernel has done it. `reset_after_head(conn_id, on_conn)`
    True resets the connection as soon as a request's head is read, before its body.
    """

    def __init__(self, script, reset_after_head=None) -> None:
        self.script = script
        self.reset_after_head = reset_after_head
        self.resets_after_head = 0
        self.exchanges: list[Exchange] = []
        self.opened = 0
        self.open_now = 0
        self.peak_open = 0
        self._writers: dict[int, asyncio.StreamWriter] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    def __enter__(self) -> ScriptServer:
        self._start_thread("script server")
        return self

    def __exit__(self, *exc) -> None:
        self._stop_thread()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for w in list(self._writers.values()):
            _abort(w)
        await asyncio.sleep(0.01)  # handlers see their sockets gone and end

    def abort(self, conn_id: int) -> None:
        """Reset connection `conn_id` now (RST, from the test thread)."""
        self._end(conn_id, _abort)

    def close(self, conn_id: int) -> None:
        """Close connection `conn_id` now (FIN, from the test thread); returns once closed."""
        self._end(conn_id, lambda w: w.transport.close())

    def _end(self, conn_id: int, how) -> None:
        assert self._loop is not None

        async def go() -> None:
            w = self._writers.get(conn_id)
            if w is not None:
                how(w)
                await asyncio.sleep(0.01)  # the transport closes its socket on the next turn

        asyncio.run_coroutine_threadsafe(go(), self._loop).result(10)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn_id = self.opened
        self.opened += 1
        self.open_now += 1
        self.peak_open = max(self.peak_open, self.open_now)
        self._writers[conn_id] = writer
        on_conn = 0
        try:
            while True:
                method, path, headers = await _read_head(reader)
                if self.reset_after_head and self.reset_after_head(conn_id, on_conn):
                    self.resets_after_head += 1
                    _abort(writer)
                    return
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                ex = Exchange(
                    conn_id, on_conn, len(self.exchanges), method, path, headers, body, writer
                )
                self.exchanges.append(ex)
                on_conn += 1
                keep = await self.script(ex)
                await writer.drain()
                if not keep:
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            self.open_now -= 1
            self._writers.pop(conn_id, None)
            if not writer.is_closing():
                writer.close()
