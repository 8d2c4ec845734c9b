"""Mooncake request traces (JSON Lines, 512-token hash blocks) -> v1 open-loop blocks trace.

Each request becomes its own single-call task with its arrival `timestamp` (ms) as `at_s`;
hash ids share one namespace per file (equal ids mean equal prefix content across requests).
Several files keep their own namespaces and their own time origins.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from replay.errors import TraceError
from replay.trace.importers.common import (
    DEFAULT_VOCAB,
    block_ids,
    call_lengths,
    expand_sources,
    iter_jsonl,
    unique_names,
)
from replay.trace.model import Call, Trace, TraceHeader
from replay.trace.schedule import MAX_AT_S, MAX_SPAN_S

__all__ = ["import_mooncake", "MOONCAKE_BLOCK_SIZE"]

MOONCAKE_BLOCK_SIZE = 512
_MS_HINT = "Mooncake timestamps are milliseconds from the trace's start (subtract the first one)"


def _int(obj: dict, key: str, file: str, line: int) -> int:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise TraceError(file, line, key, "missing or not a non-negative integer")
    return v


def _check_span(calls: list[Call], where: list[tuple[str, int]]) -> None:
    """Arrivals may spread over at most the reader's `MAX_SPAN_S` (every run checks it)."""
    ats = [float(c.at_s or 0.0) for c in calls]
    lo = min(range(len(ats)), key=ats.__getitem__)
    hi = max(range(len(ats)), key=ats.__getitem__)
    if ats[hi] - ats[lo] > MAX_SPAN_S:
        file, line = where[hi]
        raise TraceError(
            file,
            line,
            "timestamp",
            f"arrives {ats[hi] - ats[lo]:.3g} s after {where[lo][0]}:{where[lo][1]}, more than "
            f"{MAX_SPAN_S:.0e} s; {_MS_HINT}",
        )


def import_mooncake(sources: Sequence[str | os.PathLike], vocab_size: int | None = None) -> Trace:
    """Import Mooncake JSONL files (or directories of `*.jsonl`) into one open-loop trace."""
    files = expand_sources(sources, "*.jsonl")
    if not files:
        raise TraceError(", ".join(map(str, sources)), None, None, "no Mooncake *.jsonl files")
    bs = MOONCAKE_BLOCK_SIZE
    calls: list[Call] = []
    where: list[tuple[str, int]] = []  # (file, line) of each call, for the span check
    names = unique_names(files)
    for path in files:
        file = str(path)
        ns = f"mooncake:{names[path]}"  # a file's hash ids are its own
        before = len(calls)
        for lineno, obj in iter_jsonl(path):
            ts = obj.get("timestamp")
            if isinstance(ts, bool) or not isinstance(ts, int | float) or ts < 0:
                raise TraceError(file, lineno, "timestamp", "missing or not a number >= 0 (ms)")
            if not ts / 1000.0 <= MAX_AT_S:  # the reader's bound on at_s
                raise TraceError(
                    file,
                    lineno,
                    "timestamp",
                    f"{ts:.3g} ms is {ts / 1000.0:.3g} s, more than {MAX_AT_S:.0e} s; {_MS_HINT}",
                )
            n_in = _int(obj, "input_length", file, lineno)
            n_out = _int(obj, "output_length", file, lineno)
            call_lengths(file, lineno, ("input_length", n_in), ("output_length", n_out))
            blocks = np.asarray(block_ids(obj.get("hash_ids"), "hash_ids", file, lineno), np.int64)
            if not (len(blocks) - 1) * bs < n_in < (len(blocks) + 1) * bs:
                raise TraceError(
                    file, lineno, "hash_ids", f"{len(blocks)} blocks do not cover {n_in} tokens"
                )
            calls.append(
                Call(
                    task=f"{names[path]}-{lineno:06d}",
                    index=0,
                    gap_s=0.0,
                    keep=0,
                    append=blocks,
                    prompt_len=n_in,
                    output_len=n_out,
                    at_s=ts / 1000.0,
                    ns=ns,
                )
            )
            where.append((file, lineno))
        if len(calls) == before:  # a truncated download or a wrong file: not a 0-call trace
            raise TraceError(file, None, None, "no requests in this file")
    _check_span(calls, where)
    header = TraceHeader(
        tokens="blocks",
        vocab_size=vocab_size or DEFAULT_VOCAB,
        block_size=bs,
        source="mooncake",
        meta={"files": [names[p] + p.suffix for p in files], "open_loop": True},
    )
    return Trace(header, calls)
