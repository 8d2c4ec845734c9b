"""Trace statistics (`replay trace stats`): sizes, prompt lengths, prefix reuse, gaps.

`reuse_fraction` = sum over calls of the longest common prefix (in tokens) of the call's prompt
with the same task's previous context (previous prompt + previous output), divided by
`prompt_tokens`; a task's first call counts 0. It is computed on the expanded token ids, one task
at a time, so memory stays at one context.

`prefix_cacheable_fraction` = the prompt tokens an unbounded prefix cache of `CACHE_BLOCK_TOKENS`
(ids; the block size of a block-hash trace) token blocks would serve, over `prompt_tokens`: every
full block whose prefix-chained key (`replay.trace.keys`) appeared before, in any call of any task.
With prefix-chained keys that is the full blocks less the distinct keys (each key misses once),
whatever the calls' order. It shows reuse across tasks, which `reuse_fraction` does not: a
Mooncake trace has one call a task (`reuse_fraction` 0) and shares prefixes between them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np

from replay.trace.keys import ChunkKeyer
from replay.trace.model import Trace

__all__ = ["TraceStats", "trace_stats", "common_prefix_len"]

_CHUNK = 4096
CACHE_BLOCK_TOKENS = 16  # prefix_cacheable_fraction's block on token-id traces (vLLM's default)


@dataclass(frozen=True)
class TraceStats:
    """The numbers `replay trace stats` prints; `to_dict()` keys are the `--json` names."""

    tasks: int  # all tasks, sub-agent tasks included
    calls: int
    prompt_tokens: int
    output_tokens: int
    unique_tokens: int  # prompt tokens stored as new in the deltas (not kept from a context)
    prompt_len_mean: float | None
    prompt_len_p50: float | None
    prompt_len_p90: float | None
    prompt_len_max: int | None
    reuse_fraction: float | None
    prefix_cacheable_fraction: float | None  # any earlier call's prefix, unbounded cache
    gap_p50_s: float | None  # over calls after a task's first (first calls start a slot)
    gap_p90_s: float | None
    gap_max_s: float | None
    subagents: int  # tasks spawned by another task

    def to_dict(self) -> dict:
        return asdict(self)


def common_prefix_len(a: np.ndarray, b: np.ndarray, start: int = 0) -> int:
    """Length of the common prefix of `a` and `b`, given that the first `start` entries agree.

    Compares in chunks so a mismatch right after `start` costs O(chunk), not O(len).
    """
    n = min(len(a), len(b))
    i = min(start, n)
    while i < n:
        j = min(n, i + _CHUNK)
        diff = np.flatnonzero(a[i:j] != b[i:j])
        if len(diff):
            return i + int(diff[0])
        i = j
    return n


def _context_prefix(
    prompt: np.ndarray, prev_prompt: np.ndarray, prev_out: np.ndarray, start: int
) -> int:
    """Common prefix of `prompt` with prev_prompt + prev_out (first `start` known equal)."""
    k = common_prefix_len(prompt, prev_prompt, start)
    if k < len(prev_prompt) or k >= len(prompt):
        return k
    return k + common_prefix_len(prompt[k:], prev_out, max(0, start - k))


def _outputs_capped(trace: Trace) -> Trace:
    """`trace` with each output cut to its task's longest prompt, for expanding prompts only.

    No later prompt can reuse more of an output than its own length, so the reuse numbers are
    the same; but a trace recording `output_len: 10**12` would otherwise have its stand-in
    output ids (8 bytes each while made) built in full. Stand-ins of a shorter length are a
    prefix of the longer ones. Returns `trace` itself when nothing needs cutting."""
    cap = {t: max(c.prompt_len for c in cs) for t, cs in trace.tasks.items()}
    if all(c.output_len <= cap[c.task] for c in trace.calls):
        return trace
    calls = [
        c
        if c.output_len <= cap[c.task]
        else replace(
            c,
            output_len=cap[c.task],
            output=None if c.output is None else c.output[: cap[c.task]],
        )
        for c in trace.calls
    ]
    return Trace(trace.header, calls, path=trace.path)


def _pct(x: np.ndarray, q: float) -> float | None:
    return float(np.percentile(x, q)) if len(x) else None


def trace_stats(trace: Trace) -> TraceStats:
    """Compute `TraceStats` for a validated trace (pure; expands one task at a time)."""
    h = trace.header
    unit = 1 if h.tokens == "ids" else int(h.block_size or 1)
    prompt_lens = np.fromiter((c.prompt_len for c in trace.calls), np.int64, len(trace.calls))
    gaps = np.fromiter((c.gap_s for c in trace.calls if c.index > 0), np.float64)
    unique = sum(c.prompt_len - min(c.keep * unit, c.prompt_len) for c in trace.calls)
    reused = 0
    block = CACHE_BLOCK_TOKENS if unit == 1 else unit
    keyer = ChunkKeyer(block)
    blocks = 0
    view = _outputs_capped(trace)
    for task in view.tasks:
        prev_prompt: np.ndarray | None = None
        prev_out = np.empty(0, np.int32)
        prev_keys: np.ndarray | None = None
        for step in view.steps(task):
            c = step.call
            same = 0
            if prev_prompt is not None:
                # In ids traces the kept tokens are equal by construction; block traces are
                # compared from the start (a task's namespace could change between calls).
                start = c.keep if unit == 1 else 0
                context = _context_prefix(step.prompt, prev_prompt, prev_out, start)
                reused += context
                # the part of it inside the previous prompt: where the previous keys still hold
                same = min(context, len(prev_prompt))
            prev_keys = keyer.keys(step.prompt, prev_keys, same)
            blocks += len(prev_keys)
            prev_prompt, prev_out = step.prompt, step.output
    total = int(prompt_lens.sum())
    return TraceStats(
        tasks=len(trace.tasks),
        calls=len(trace.calls),
        prompt_tokens=total,
        output_tokens=trace.output_tokens,
        unique_tokens=int(unique),
        prompt_len_mean=float(prompt_lens.mean()) if len(prompt_lens) else None,
        prompt_len_p50=_pct(prompt_lens, 50),
        prompt_len_p90=_pct(prompt_lens, 90),
        prompt_len_max=int(prompt_lens.max()) if len(prompt_lens) else None,
        reuse_fraction=reused / total if total else None,
        prefix_cacheable_fraction=(blocks - len(keyer)) * block / total if total else None,
        gap_p50_s=_pct(gaps, 50),
        gap_p90_s=_pct(gaps, 90),
        gap_max_s=float(gaps.max()) if len(gaps) else None,
        subagents=sum(1 for cs in trace.tasks.values() if cs[0].parent is not None),
    )
