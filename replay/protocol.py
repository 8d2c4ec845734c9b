"""The transport seam: what the agent pool sends and gets back, whatever is on the other side.

Shared by the driver and the simulator (so neither imports the other): the pool builds a
`CompletionRequest` per call and awaits `Transport.complete()`. HTTP transports talk to any
OpenAI-compatible server; `replay.sim`'s in-process transport answers from the reference engine
under virtual time. Transports raise only `replay.errors.RequestFailed` (or `ServerGone`). Times
are seconds on the running loop's clock (`loop.time()`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from replay.errors import ErrorKind, RequestFailed

__all__ = ["CompletionRequest", "CompletionResult", "Transport", "ConnectionRefused"]


@dataclass(frozen=True, eq=False)
class CompletionRequest:
    """One call as sent: exact prompt ids, the forced output length, optional ids to force."""

    task: str  # the agent/session id; also sent as OpenAI `user` so servers can attribute it
    call: int
    prompt: np.ndarray  # int32 token ids, exactly the recorded prompt
    max_tokens: int  # recorded output length; sent as max_tokens = min_tokens with ignore_eos
    forced_output: np.ndarray | None = None  # recorded output ids, when the engine can force them
    extras: dict = field(default_factory=dict)  # engine adapter's extra request fields


@dataclass
class CompletionResult:
    """What came back. Counts are as the server reported them (None when it did not)."""

    t_first_token: float | None  # loop time of the first streamed token (None if not streamed)
    t_end: float  # loop time when the response was complete
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens
    cached_by_source: dict[str, int] | None = (
        None  # e.g. SGLang's per-tier details, sim's device/host
    )
    # returned token ids, when the server returns them (the in-process simulator hands back the
    # forced int32 array itself: it generates exactly those)
    output_ids: list[int] | np.ndarray | None = None
    extra: dict = field(default_factory=dict)  # engine-specific fields worth keeping (timings, ...)
    # Token-level stream times (loop time), for inter-token latency and time to second token:
    # when the second and the last output token arrived, and how many tokens the stream carried
    # (token ids counted when the server returns them, else one per non-empty text chunk).
    t_second_token: float | None = None
    t_last_token: float | None = None
    stream_tokens: int | None = None


@runtime_checkable
class Transport(Protocol):
    """Sends completion requests. One instance per run; `start` before, `close` after."""

    name: str

    async def start(self) -> None: ...

    async def complete(self, request: CompletionRequest) -> CompletionResult: ...

    async def close(self) -> None: ...


class ConnectionRefused(RequestFailed):
    """The server refused the connection (nothing listening). The pool retries such a call until
    `server_gone_grace_s` has passed since the first refusal, then stops the run as failed."""

    def __init__(self, message: str):
        super().__init__(ErrorKind.CONNECTION, message)
