"""What the HTTP transports share: connection options and request bodies.

The response parsing is in `replay.driver.sse`, the error map and the resend rule in
`replay.driver.http_errors`.

Bodies are encoded with orjson straight from int32 arrays. A task's next prompt usually starts with
its whole previous prompt (previous context kept, new tokens appended), so `PromptEncoder` keeps the
encoded bytes of each task's last prompt and encodes only the new tail when the prefix matches.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit

import numpy as np
import orjson

from replay.protocol import CompletionRequest

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

    def get(self, request: CompletionRequest) -> Body | None:
        """The prepared body, left in place; None when none was prepared."""
        return self._ready.get((request.task, request.call))

    def __len__(self) -> int:
        return len(self._ready)

    def __contains__(self, request: CompletionRequest) -> bool:
        return (request.task, request.call) in self._ready

    def clear(self) -> None:
        self._ready.clear()
