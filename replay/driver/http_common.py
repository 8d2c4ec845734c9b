"""What the HTTP transports share: request bodies, SSE parsing, error mapping and the resend rule.

Bodies are encoded with orjson straight from int32 arrays. A task's next prompt usually starts with
its whole previous prompt (previous context kept, new tokens appended), so `PromptEncoder` keeps the
encoded bytes of each task's last prompt and encodes only the new tail when the prefix matches.
"""

from __future__ import annotations

import errno
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit

import numpy as np
import orjson

from replay.errors import ErrorKind, RequestFailed
from replay.protocol import CompletionRequest, CompletionResult, ConnectionRefused

__all__ = [
    "COMPLETIONS_PATH",
    "MODELS_PATH",
    "HttpOptions",
    "default_request_fields",
    "PromptEncoder",
    "PromptParts",
    "encode_prompt",
    "prompt_json",
    "build_body",
    "body_parts",
    "ReadyBodies",
    "SseAccumulator",
    "http_status_error",
    "refused",
    "parse_json",
    "ErrorMap",
    "StaleConnection",
    "TrackedBody",
    "resend_once",
    "timed_out",
    "bad_response",
    "lost",
    "cut_off",
]

COMPLETIONS_PATH = "/v1/completions"
MODELS_PATH = "/v1/models"
_NP = orjson.OPT_SERIALIZE_NUMPY


@dataclass(frozen=True)
class HttpOptions:
    """Connection settings of an HTTP transport. One client session per run; `limit` = pool size."""

    base_url: str
    model: str | None = None  # `model` field; None sends the first id from /v1/models
    limit: int = 64  # connection pool size (keep-alive connections)
    request_timeout_s: float = 600.0  # whole request, first byte to last
    connect_timeout_s: float = 10.0
    # keep-alive connections opened by `start()` (concurrent GET /v1/models), so that the first
    # sends of a run do not pay TCP setup inside the measured time; 0 opens them on demand
    prewarm_connections: int = 0

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {self.base_url!r}")
        try:  # refused here, not by the HTTP client deep inside the run
            parts = urlsplit(self.base_url)
            parts.port  # noqa: B018 - parsing the port is the check
        except ValueError as e:
            raise ValueError(f"{self.base_url!r} is not a valid URL ({e})") from None
        if not parts.hostname:
            raise ValueError(f"{self.base_url!r} names no host")
        if self.limit < 1:
            raise ValueError(f"limit must be >= 1, got {self.limit}")
        if self.request_timeout_s <= 0 or self.connect_timeout_s <= 0:
            raise ValueError("timeouts must be > 0")
        if not 0 <= self.prewarm_connections <= self.limit:
            raise ValueError(
                f"prewarm_connections must be in 0..limit, got {self.prewarm_connections}"
            )

    @property
    def root(self) -> str:
        return self.base_url.rstrip("/").removesuffix("/v1")


def default_request_fields(task: str, max_tokens: int) -> dict[str, Any]:
    """Plain OpenAI fields that make a call do exactly the recorded work (the default adapter).

    `min_tokens` and `ignore_eos` are vLLM/SGLang extensions most OpenAI-compatible servers accept;
    servers that do not know them ignore them, and the length check per call catches the result.
    """
    return {
        "max_tokens": max_tokens,
        "min_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "user": task,
    }


# A prompt's JSON list without its closing bracket, as parts to concatenate ("[1,2" "," "3,4").
# Parts let a grown prompt reuse the previous parts without copying them; the body is joined once.
PromptParts = tuple[bytes | memoryview, ...]


def encode_prompt(prompt: np.ndarray) -> PromptParts:
    full = orjson.dumps(np.ascontiguousarray(prompt), option=_NP)
    return (memoryview(full)[:-1],)


def prompt_json(parts: PromptParts) -> bytes:
    """The complete JSON list of `parts` (for tests and plain callers)."""
    return b"".join((*parts, b"]"))


class PromptEncoder:
    """Encodes prompt ids as JSON, reusing the encoding of the task's previous prompt.

    Reuse applies when the new prompt starts with the whole previous prompt (an agent's next turn
    keeps its context and appends); then only the appended tokens are encoded. Memory: one encoded
    prompt (about 6 bytes a token) per task seen recently, at most `max_tasks`.
    """

    def __init__(self, max_tasks: int = 4096) -> None:
        self._cache: OrderedDict[str, tuple[np.ndarray, PromptParts]] = OrderedDict()
        self._max_tasks = max_tasks
        self.reused_tokens = 0  # tokens whose encoding was reused (for benchmarks)

    def encode(self, task: str, prompt: np.ndarray) -> PromptParts:
        prev = self._cache.pop(task, None)
        parts: PromptParts | None = None
        if prev is not None:
            prev_ids, prev_parts = prev
            n = len(prev_ids)
            if 0 < n <= len(prompt) and np.array_equal(prompt[:n], prev_ids):
                parts = prev_parts
                if n < len(prompt):
                    tail = orjson.dumps(np.ascontiguousarray(prompt[n:]), option=_NP)
                    # a bytes copy, not a memoryview: tails are small, and bytes are invisible
                    # to the cyclic GC (two tracked objects per call otherwise; see quiet_gc)
                    parts = (*prev_parts, b",", tail[1:-1])
                self.reused_tokens += n
        if parts is None or len(parts) > 256:  # keep the part list short on very long tasks
            parts = encode_prompt(prompt)
        self._cache[task] = (prompt, parts)
        if len(self._cache) > self._max_tasks:
            self._cache.popitem(last=False)
        return parts

    def forget(self, task: str) -> None:
        self._cache.pop(task, None)


def build_body(
    model: str | None, request: CompletionRequest, prompt: PromptParts | None = None
) -> bytes:
    """The /v1/completions JSON body: default fields, the adapter's extras, then the prompt
    (last, so that servers and benchmarks can find it cheaply)."""
    return b"".join(body_parts(model, request, prompt))


def body_parts(
    model: str | None, request: CompletionRequest, prompt: PromptParts | None = None
) -> list[bytes | memoryview]:
    """`build_body` as a list of parts, for transports that write them without joining
    (a 100K-token body is ~0.6 MB; the raw transport hands the parts to one `writelines`)."""
    fields: dict[str, Any] = {}
    if model is not None:
        fields["model"] = model
    fields.update(default_request_fields(request.task, request.max_tokens))
    fields.update(request.extras)
    fields.pop("prompt", None)
    if prompt is None:
        prompt = encode_prompt(request.prompt)
    head = orjson.dumps(fields, option=_NP)
    return [memoryview(head)[:-1], b',"prompt":', *prompt, b"]}"]


Body = TypeVar("Body")


class ReadyBodies(Generic[Body]):
    """Request bodies built ahead of their send, while the call's gap runs, held by call.

    `prepare` builds a body (prompt ids encoded, JSON laid out) and keeps it; `take` at the
    deadline hands it over, or builds it then when none was prepared, so the send only writes
    bytes. The agent pool decides how many are held at once (a bounded window ahead); `clear`
    drops those of calls that were never sent (a stopped run).
    """

    def __init__(self, build: Callable[[CompletionRequest], Body]) -> None:
        self._build = build
        self._ready: dict[tuple[str, int], Body] = {}

    def prepare(self, request: CompletionRequest) -> None:
        self._ready[(request.task, request.call)] = self._build(request)

    def take(self, request: CompletionRequest) -> Body:
        body = self._ready.pop((request.task, request.call), None)
        return self._build(request) if body is None else body

    def __len__(self) -> int:
        return len(self._ready)

    def __contains__(self, request: CompletionRequest) -> bool:
        return (request.task, request.call) in self._ready

    def clear(self) -> None:
        self._ready.clear()


class SseAccumulator:
    """Parses an OpenAI completions SSE stream (or a plain JSON body) into a `CompletionResult`.

    Feed raw lines as they arrive with the loop time; `finish` checks that the stream ended
    properly. Anything that is not the OpenAI shape raises `RequestFailed` of kind `malformed`.
    """

    def __init__(self) -> None:
        self.t_first_token: float | None = None
        self.t_second_token: float | None = None
        self.t_last_token: float | None = None
        self.stream_tokens = 0
        self.usage: dict | None = None
        self.output_ids: list[int] | None = None
        self.extra: dict = {}
        self.done = False
        self.chunks = 0
        self._partial = b""

    def feed_bytes(self, data: bytes, now: float) -> None:
        """Feed a raw chunk of the body; complete lines are parsed, a partial one is kept."""
        buf = self._partial + data if self._partial else data
        lines = buf.split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            self.feed_line(line, now)

    def flush(self, now: float) -> None:
        if self._partial:
            line, self._partial = self._partial, b""
            self.feed_line(line, now)

    def feed_line(self, line: bytes, now: float) -> None:
        line = line.strip()
        if not line or line.startswith(b":"):
            return
        if not line.startswith(b"data:"):
            if line.startswith((b"event:", b"id:", b"retry:")):
                return
            raise RequestFailed(
                ErrorKind.MALFORMED, f"unexpected line in event stream: {line[:80]!r}"
            )
        data = line[5:].strip()
        if data == b"[DONE]":
            self.done = True
            return
        self.feed_object(parse_json(data), now)

    def feed_object(self, obj: Any, now: float) -> None:
        if not isinstance(obj, dict):
            raise RequestFailed(
                ErrorKind.MALFORMED, f"expected a JSON object, got {type(obj).__name__}"
            )
        if "error" in obj and "choices" not in obj:
            raise RequestFailed(
                ErrorKind.MALFORMED, f"error object in stream: {str(obj['error'])[:200]}"
            )
        self.chunks += 1
        choices = obj.get("choices")
        if choices:
            if not isinstance(choices, list) or not isinstance(choices[0], dict):
                raise RequestFailed(ErrorKind.MALFORMED, "`choices` is not a list of objects")
            choice = choices[0]
            ids = choice.get("token_ids")
            if choice.get("text") or ids:
                self._tokens_at(len(ids) if isinstance(ids, list) else 1, now)
            if isinstance(ids, list):
                self.output_ids = (self.output_ids or []) + ids
        usage = obj.get("usage")
        if usage is not None:
            if not isinstance(usage, dict):
                raise RequestFailed(ErrorKind.MALFORMED, "`usage` is not an object")
            self.usage = usage
        for key in ("timings", "meta_info", "sglext"):  # llama.cpp / SGLang per-request details
            if key in obj:
                self.extra[key] = obj[key]

    def _tokens_at(self, n: int, now: float) -> None:
        """`n` output tokens arrived at `now`: the first, second and last token times."""
        before = self.stream_tokens
        self.stream_tokens += n
        if before == 0:
            self.t_first_token = now
        if before < 2 <= self.stream_tokens:
            self.t_second_token = now
        self.t_last_token = now

    def _by_source(self, usage: dict) -> dict[str, int] | None:
        """Cached tokens per source ({"device": .., "host": ..}): extra keys of
        `prompt_tokens_details`, or SGLang's `cached_tokens_details` (in usage, meta_info, or
        the response-level `sglext` object SGLang 0.5.23's OpenAI server sends)."""
        meta = self.extra.get("meta_info")
        ext = self.extra.get("sglext")
        for d in (
            usage.get("prompt_tokens_details"),
            usage.get("cached_tokens_details"),
            meta.get("cached_tokens_details") if isinstance(meta, dict) else None,
            ext.get("cached_tokens_details") if isinstance(ext, dict) else None,
        ):
            found = _counts(d)
            if found:
                return found
        return None

    def result(self, t_end: float, streamed: bool) -> CompletionResult:
        if streamed and not self.done and self.usage is None:
            raise RequestFailed(ErrorKind.MALFORMED, "event stream ended without usage or [DONE]")
        if self.chunks == 0:
            raise RequestFailed(ErrorKind.MALFORMED, "response had no completion object")
        usage = self.usage or {}
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        return CompletionResult(
            t_first_token=self.t_first_token if streamed else None,
            t_end=t_end,
            prompt_tokens=_int_or_none(usage.get("prompt_tokens")),
            completion_tokens=_int_or_none(usage.get("completion_tokens")),
            cached_tokens=_int_or_none(cached),
            cached_by_source=self._by_source(usage),
            output_ids=self.output_ids,
            extra=self.extra,
            t_second_token=self.t_second_token if streamed else None,
            t_last_token=self.t_last_token if streamed else None,
            stream_tokens=self.stream_tokens if streamed else None,
        )


def _counts(d: Any) -> dict[str, int]:
    if not isinstance(d, dict):
        return {}
    return {
        k: int(v)
        for k, v in d.items()
        if k != "cached_tokens" and isinstance(v, int | float) and not isinstance(v, bool)
    }


def parse_json(data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise RequestFailed(ErrorKind.MALFORMED, f"invalid JSON ({e}): {data[:80]!r}") from None


def _int_or_none(v: Any) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise RequestFailed(ErrorKind.MALFORMED, f"usage count is not a number: {v!r}")
    return int(v)


def http_status_error(status: int, body: bytes) -> RequestFailed:
    """HTTP error status -> `http_4xx`/`http_5xx` with the server's message (shortened)."""
    kind = ErrorKind.HTTP_4XX if 400 <= status < 500 else ErrorKind.HTTP_5XX
    text = body[:300].decode("utf-8", "replace").strip()
    return RequestFailed(kind, f"HTTP {status}: {text}", status=status)


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


class ErrorMap:
    """A transport's exception table: `(exception types, what happened)` pairs, first match wins."""

    def __init__(
        self, table: tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], str], ...]
    ) -> None:
        bad = [what for _, what in table if what not in _WHAT]
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
