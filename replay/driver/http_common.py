"""What both HTTP transports share: request bodies, SSE parsing, and error translation.

Bodies are encoded with orjson straight from int32 arrays. A task's next prompt usually starts with
its whole previous prompt (previous context kept, new tokens appended), so `PromptEncoder` keeps the
encoded bytes of each task's last prompt and encodes only the new tail when the prefix matches.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from replay.driver.transport import CompletionRequest, CompletionResult, ConnectionRefused
from replay.errors import RequestFailed

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
    "SseAccumulator",
    "http_status_error",
    "refused",
    "parse_json",
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


class SseAccumulator:
    """Parses an OpenAI completions SSE stream (or a plain JSON body) into a `CompletionResult`.

    Feed raw lines as they arrive with the loop time; `finish` checks that the stream ended
    properly. Anything that is not the OpenAI shape raises `RequestFailed("malformed", ...)`.
    """

    def __init__(self) -> None:
        self.t_first_token: float | None = None
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
            raise RequestFailed("malformed", f"unexpected line in event stream: {line[:80]!r}")
        data = line[5:].strip()
        if data == b"[DONE]":
            self.done = True
            return
        self.feed_object(parse_json(data), now)

    def feed_object(self, obj: Any, now: float) -> None:
        if not isinstance(obj, dict):
            raise RequestFailed("malformed", f"expected a JSON object, got {type(obj).__name__}")
        if "error" in obj and "choices" not in obj:
            raise RequestFailed("malformed", f"error object in stream: {str(obj['error'])[:200]}")
        self.chunks += 1
        choices = obj.get("choices")
        if choices:
            if not isinstance(choices, list) or not isinstance(choices[0], dict):
                raise RequestFailed("malformed", "`choices` is not a list of objects")
            choice = choices[0]
            if self.t_first_token is None and (choice.get("text") or choice.get("token_ids")):
                self.t_first_token = now
            ids = choice.get("token_ids")
            if isinstance(ids, list):
                self.output_ids = (self.output_ids or []) + ids
        usage = obj.get("usage")
        if usage is not None:
            if not isinstance(usage, dict):
                raise RequestFailed("malformed", "`usage` is not an object")
            self.usage = usage
        for key in ("timings", "meta_info", "sglext"):  # llama.cpp / SGLang per-request details
            if key in obj:
                self.extra[key] = obj[key]

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
            raise RequestFailed("malformed", "event stream ended without usage or [DONE]")
        if self.chunks == 0:
            raise RequestFailed("malformed", "response had no completion object")
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
        raise RequestFailed("malformed", f"invalid JSON ({e}): {data[:80]!r}") from None


def _int_or_none(v: Any) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise RequestFailed("malformed", f"usage count is not a number: {v!r}")
    return int(v)


def http_status_error(status: int, body: bytes) -> RequestFailed:
    """HTTP error status -> `http_4xx`/`http_5xx` with the server's message (shortened)."""
    kind = "http_4xx" if 400 <= status < 500 else "http_5xx"
    text = body[:300].decode("utf-8", "replace").strip()
    return RequestFailed(kind, f"HTTP {status}: {text}", status=status)


def refused(url: str, why: str) -> ConnectionRefused:
    return ConnectionRefused(f"connection refused by {url} ({why}); is the server running?")
