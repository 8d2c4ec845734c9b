"""One call's ends: the request a trace step becomes, and the row its outcome becomes.

Functions over the step, the options and the transport's result, so that the agent pool only
decides when to send and what to do with a failure; the columns are described in docs/results.md.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np

from replay.counters import DEVICE_HIT_TOKENS, HOST_RESTORE_TOKENS
from replay.driver.options import RunOptions, task_identity_fields
from replay.driver.records import CallRecord, stream_columns
from replay.errors import ErrorKind, RequestFailed
from replay.protocol import CompletionRequest, CompletionResult
from replay.status import CallStatus
from replay.trace.model import Step, Trace
from replay.trace.tokens import output_tokens

__all__ = ["Prompts", "build_request", "call_row"]

# Python 3.11 reads an enum member off its class through a descriptor (~0.4 us): once per call
_OK, _ERROR = CallStatus.OK, CallStatus.ERROR


class Prompts:
    """The requests of the tasks under way, each built from its task's prompts in call order.

    A task's prompts are expanded one call at a time (only the current context is held); a task
    is forgotten after its last call, or when `drop` ends it early.
    """

    def __init__(self, trace: Trace, opt: RunOptions) -> None:
        self._trace = trace
        self._opt = opt
        self._vocab_size = trace.header.vocab_size
        self._steps: dict[str, Iterator[Step]] = {}

    def start(self, task: str) -> None:
        """Expand `task`'s first prompt now (ahead of the clock); an expansion error is raised
        again where the task's first call is built, as an agent failure."""
        steps = self._trace.steps(task)
        try:
            first = next(steps)
        except Exception:  # noqa: BLE001 - see the docstring
            self._steps[task] = self._trace.steps(task)
            return
        self._steps[task] = itertools.chain((first,), steps)

    def request(self, task: str, index: int) -> CompletionRequest:
        """The request of `task`'s call `index`, the call after the one built before it."""
        if task not in self._steps:
            self._steps[task] = self._trace.steps(task)
        step = next(self._steps[task])  # a task's calls are ready one at a time, in order
        if index + 1 == len(self._trace.tasks[task]):
            del self._steps[task]
        return build_request(step, self._opt, self._vocab_size)

    def drop(self, task: str) -> None:
        self._steps.pop(task, None)


def build_request(step: Step, opt: RunOptions, vocab_size: int) -> CompletionRequest:
    """The request for `step`: its prompt (cut to `truncate_prompt_tokens`), its recorded output
    as the forced output when forcing, and the engine adapter's extra fields.

    A call recorded with fewer output tokens than the server accepts (`min_max_tokens`: vLLM
    refuses `max_tokens` 0) asks for that many, its forced output made up with the stand-in ids
    of the trace format; the next prompt is the trace's, so the extra token is in no context."""
    c = step.call
    prompt = step.prompt
    n = opt.truncate_prompt_tokens
    if n is not None and len(prompt) > n:
        prompt = prompt[:n]
    n_out = c.output_len
    forced = step.output if opt.forcing else None
    if n_out < opt.min_max_tokens:
        n_out = opt.min_max_tokens
        if forced is not None:
            forced = output_tokens(c.task, c.index, n_out, vocab_size)
    extras: dict[str, Any] = {}
    if opt.request_extras is not None:
        forced_ids = forced.tolist() if forced is not None else None
        extras = opt.request_extras(n_out, forced_ids)
    if opt.efficientagent_task_id:
        extras = task_identity_fields(c.task, extras)
    return CompletionRequest(
        task=c.task,
        call=c.index,
        prompt=prompt,
        max_tokens=n_out,
        forced_output=forced,
        extras=extras,
    )


def call_row(
    req: CompletionRequest,
    slot: int,
    t0: float,
    t_ready: float,
    t_send: float,
    t_end: float,
    res: CompletionResult | None,
    error: RequestFailed | None,
    *,
    strict: bool,
    t_first_send: float | None = None,
) -> tuple[dict[str, Any], str | None]:
    """The results row of one call (times on the loop clock, made relative to `t0`), and under
    `strict` the reason the run must stop: the server's token counts differ from what was sent and
    asked for, or it sent none (then nothing says it saw the prompt that was sent).

    `t_send` is the attempt that got through; `t_first_send`, the first, when connections were
    refused before it: drift is the client's lateness, not the wait for a restarted server."""
    sent = len(req.prompt)
    t_first = reported = completion = cached = device = host = exact = None
    stream: dict[str, Any] = {}
    stop_reason = None
    if res is not None:
        if res.t_first_token is not None:
            t_first = res.t_first_token - t0
        stream = stream_columns(res, t0)
        reported, completion, cached = (
            res.prompt_tokens,
            res.completion_tokens,
            res.cached_tokens,
        )
        src = res.cached_by_source or {}
        device = _first(src, DEVICE_HIT_TOKENS, "device")
        host = _first(src, HOST_RESTORE_TOKENS, "host")
        if req.forced_output is not None and res.output_ids is not None:
            exact = _exact_match(req.forced_output, res.output_ids)
        mismatch = (res.prompt_tokens is not None and res.prompt_tokens != sent) or (
            res.completion_tokens is not None and res.completion_tokens != req.max_tokens
        )
        unchecked = res.prompt_tokens is None or res.completion_tokens is None
        if (mismatch or unchecked) and strict:
            error = RequestFailed(
                ErrorKind.LENGTH_MISMATCH,
                f"sent {sent} prompt tokens and asked for {req.max_tokens}; server reported "
                f"{res.prompt_tokens} and {res.completion_tokens}"
                + (" (no usage in the response)" if unchecked and not mismatch else ""),
            )
            what = "length mismatch" if mismatch else "no usage to check lengths"
            stop_reason = f"--strict: {what} on {req.task} call {req.call}"
    row = CallRecord(
        task=req.task,
        call=req.call,
        slot=slot,
        t_ready=t_ready - t0,
        t_send=t_send - t0,
        t_first_token=t_first,
        t_end=t_end - t0,
        drift_s=(t_send if t_first_send is None else t_first_send) - t_ready,
        prompt_tokens=sent,
        prompt_tokens_reported=reported,
        max_tokens=req.max_tokens,
        completion_tokens=completion,
        cached_tokens=cached,
        device_hit_tokens=device,
        host_restore_tokens=host,
        exact_match=exact,
        status=_OK if error is None else _ERROR,
        error_kind=None if error is None else error.kind,
        error=None if error is None else str(error),
        **stream,
    ).as_row()
    return row, stop_reason


def _first(src: dict[str, int], *keys: str) -> int | None:
    for k in keys:
        if k in src:
            return int(src[k])
    return None


def _exact_match(forced: np.ndarray, returned: list[int] | np.ndarray) -> float:
    """Share of the forced output the server gave back, position by position (1.0 when empty, or
    when it is the forced array itself: the in-process simulator's answer)."""
    n = len(forced)
    if n == 0 or returned is forced:
        return 1.0
    got = np.asarray(returned[:n], dtype=np.int64)
    return float(np.count_nonzero(got == forced[: len(got)])) / n
