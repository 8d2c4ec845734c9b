"""Request/response logs with exact token ids (an instrumented agent harness) -> v1 ids trace.

One JSON object per line, lines of different tasks may interleave:
`task_id` (or `task`, `session_id`), `prompt_token_ids`, `generated_token_ids`, and wall-clock
`start_time`/`end_time` (or `start_s`/`end_s`, `start`/`end`), seconds. Calls of a task are
ordered by start time; `keep` is the longest common prefix of a prompt with the previous
context; `gap_s` = start − previous end of the same task (0 if they overlapped; a task's first
call has 0). Recorded times are kept relative to the log's earliest start. Tasks are ordered by
their first start.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from replay.errors import TraceError
from replay.trace.importers.common import (
    DEFAULT_VOCAB,
    call_lengths,
    expand_sources,
    iter_jsonl,
    token_ids,
)
from replay.trace.model import Call, Trace, TraceHeader
from replay.trace.stats import common_prefix_len

__all__ = ["import_tokenlog", "TASK_KEYS", "START_KEYS", "END_KEYS"]

TASK_KEYS = ("task_id", "task", "session_id")
START_KEYS = ("start_time", "start_s", "start")
END_KEYS = ("end_time", "end_s", "end")


def _pick(obj: dict, keys: tuple[str, ...], file: str, line: int, kind: type | tuple) -> object:
    for k in keys:
        v = obj.get(k)
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, kind):
                raise TraceError(file, line, k, f"has the wrong type ({type(v).__name__})")
            return v
    raise TraceError(file, line, keys[0], f"missing (one of {', '.join(keys)})")


def import_tokenlog(sources: Sequence[str | os.PathLike], vocab_size: int | None = None) -> Trace:
    """Import token-id request logs (files or directories of `*.jsonl*`) into one ids trace."""
    files = expand_sources(sources, "*.jsonl*")
    if not files:
        raise TraceError(", ".join(map(str, sources)), None, None, "no *.jsonl log files")
    rows: dict[str, list[tuple[float, float, np.ndarray, np.ndarray, int]]] = {}
    first_seen: dict[str, tuple[object, str, int]] = {}  # task name -> (raw id, file, line)
    for path in files:
        file = str(path)
        for lineno, obj in iter_jsonl(path):
            raw = _pick(obj, TASK_KEYS, file, lineno, (str, int))
            task = str(raw)
            seen = first_seen.setdefault(task, (raw, file, lineno))
            if type(seen[0]) is not type(raw):  # 5 and "5" would merge two tasks into one
                raise TraceError(
                    file,
                    lineno,
                    TASK_KEYS[0],
                    f"task id {raw!r} and {seen[0]!r} ({seen[1]} line {seen[2]}) both name "
                    f"task {task!r}; write every id of one task with one type",
                )
            start = float(_pick(obj, START_KEYS, file, lineno, (int, float)))  # type: ignore[arg-type]
            end = float(_pick(obj, END_KEYS, file, lineno, (int, float)))  # type: ignore[arg-type]
            if end < start:
                raise TraceError(file, lineno, END_KEYS[0], f"end {end} is before start {start}")
            prompt = token_ids(obj, "prompt_token_ids", file, lineno)
            out = token_ids(obj, "generated_token_ids", file, lineno)
            lengths = (("prompt_token_ids", len(prompt)), ("generated_token_ids", len(out)))
            call_lengths(file, lineno, *lengths)
            rows.setdefault(task, []).append((start, end, prompt, out, lineno))
    if not rows:
        raise TraceError(str(files[0]), None, None, "no requests in the log")
    t0 = min(r[0] for rs in rows.values() for r in rs)
    calls: list[Call] = []
    max_id = 0
    for task, rs in sorted(rows.items(), key=lambda kv: min(r[0] for r in kv[1])):
        rs.sort(key=lambda r: (r[0], r[4]))
        prev_prompt = prev_out = np.empty(0, np.int32)
        prev_end = None
        for i, (start, end, prompt, out, lineno) in enumerate(rs):
            k = common_prefix_len(prompt, prev_prompt)
            if k == len(prev_prompt) and k < len(prompt):
                k += common_prefix_len(prompt[k:], prev_out)
            max_id = max(max_id, int(prompt.max(initial=0)), int(out.max(initial=0)))
            calls.append(
                Call(
                    task=task,
                    index=i,
                    gap_s=0.0 if prev_end is None else max(0.0, round(start - prev_end, 6)),
                    keep=k,
                    append=prompt[k:],
                    prompt_len=len(prompt),
                    output_len=len(out),
                    output=out,
                    recorded={"start_s": round(start - t0, 6), "end_s": round(end - t0, 6)},
                    line=lineno,
                )
            )
            prev_prompt, prev_out, prev_end = prompt, out, end
    vocab = vocab_size or max(DEFAULT_VOCAB, max_id + 1)
    if vocab <= max_id:
        raise TraceError(str(files[0]), None, "vocab_size", f"{vocab} does not cover id {max_id}")
    header = TraceHeader(
        tokens="ids",
        vocab_size=vocab,
        source="tokenlog",
        meta={"files": [p.name for p in files]},
    )
    return Trace(header, calls)
