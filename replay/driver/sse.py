"""Parses an OpenAI completions response, streamed (SSE) or whole, into a `CompletionResult`.

Shared by every HTTP transport, so that a response reads the same whatever client received it;
anything that is not the OpenAI shape becomes `RequestFailed` of kind `malformed`.
"""

from __future__ import annotations

from typing import Any

import orjson

from replay.errors import ErrorKind, RequestFailed
from replay.protocol import CompletionResult

__all__ = ["SseAccumulator", "parse_json"]


def _error_kind(error: Any) -> ErrorKind:
    """An in-stream error object's kind by the HTTP code it names: 4xx the request, else the
    server (no code, or 5xx)."""
    code = error.get("code") if isinstance(error, dict) else None
    try:
        status = int(code)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        status = 500
    return ErrorKind.of_http_status(status)


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
        """Feed a raw chunk of the body; complete lines are parsed, a partial one is kept.
        Lines end in LF, CRLF or a bare CR (the SSE spec's three); a CRLF split over two chunks
        gives an extra empty line, which the spec ignores anyway."""
        if b"\r" in data:
            data = data.replace(b"\r", b"\n")
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
        """One line: a `data:` line's JSON is one event (OpenAI-compatible servers send one
        line an event); comments, other fields and a bare `data` are ignored, as the SSE spec
        says. A JSON object spread over several `data:` lines is not joined (no server here
        sends one): it fails as malformed."""
        line = line.strip()
        if not line.startswith(b"data:"):
            if line.startswith(b"\xef\xbb\xbfdata:"):  # a byte-order mark the spec allows
                self.feed_line(line[3:], now)
            return
        data = line[5:].strip()
        if not data:
            return
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
            # how vLLM and SGLang report a failure after the 200 (with the HTTP code it would
            # have had): the server failed while serving, not a response the client misread
            raise RequestFailed(
                _error_kind(obj["error"]), f"error object in stream: {str(obj['error'])[:200]}"
            )
        self.chunks += 1
        choices = obj.get("choices")
        if choices:
            if not isinstance(choices, list) or not isinstance(choices[0], dict):
                raise RequestFailed(ErrorKind.MALFORMED, "`choices` is not a list of objects")
            choice = choices[0]
            ids = choice.get("token_ids")
            if isinstance(ids, list):
                n = len(ids)
            else:
                # no ids: a chunk with text is a token, and so is one with empty text that does
                # not finish the stream (vLLM streams a token ending inside a UTF-8 character
                # so); an empty chunk that carries only the finish reason is not
                text = choice.get("text")
                n = 1 if text or (text == "" and choice.get("finish_reason") is None) else 0
            if n:
                self._tokens_at(n, now)
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
        k: _count(v)
        for k, v in d.items()
        if k != "cached_tokens" and isinstance(v, int | float) and not isinstance(v, bool)
    }


_MAX_COUNT = 1 << 63  # a row's counts are int64: one past it lost every row of the run


def _count(v: int | float) -> int:
    """A token count as the server sent it: a whole number in 0 .. 2^63 - 1, else malformed."""
    if not 0 <= v < _MAX_COUNT or v != int(v):  # also nan (no comparison holds) and inf
        raise RequestFailed(ErrorKind.MALFORMED, f"usage count out of range: {v!r}")
    return int(v)


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
    return _count(v)
