"""Context folding: rewrite an early part of each task's history from some call on.

An agent that folds its context replaces an early stretch of its history (old tool results and
turns, after the system prompt and the task statement) with a short summary, to keep prompts
bounded. For a prefix cache the damage is not the lost tokens but the changed position: every
token after the rewritten stretch has a new prefix, so the next call can reuse only the part
before it, however large the host tier is. The EfficientAgent study measured the prefix hit rate
falling from 96.5% to 51-61% on an RTX 3090 with folding on; `fold_trace` applies the same kind
of rewrite to any token-id trace so the simulator (or a real engine) can show it.

Folding state per task: the folded context is `original[:head] + summary + original[cut:]`. A
fold at call i summarizes the first `fold_fraction` of what follows the head in the current
prompt (old summary included), so `cut` moves forward in the original's positions and a fresh
summary of `summary_tokens` ids (drawn from a generator seeded by `(seed, task, call)`) replaces
the old one. Calls between folds keep the folded context and append as the original did, so
their prefix reuse stays as high as the original's.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace

import numpy as np

from replay.errors import ConfigError
from replay.trace.model import Call, Trace
from replay.trace.stats import common_prefix_len

__all__ = ["FoldSpec", "fold_trace", "fold_prompts"]


@dataclass(frozen=True)
class FoldSpec:
    """Where and how often each task's history is rewritten.

    - `from_call`: index of the first call of a task that folds (0-based).
    - `every`: fold at `from_call`, `from_call + every`, ... (1: every call from there on).
    - `keep_head_tokens`: never rewritten (system prompt, tools, task statement).
    - `fold_fraction`: share of the prompt after the head that a fold summarizes.
    - `summary_tokens`: length of the summary that replaces it (a fold that would not shrink the
      prompt is skipped).
    - `seed`: seeds the summary ids.
    """

    from_call: int = 8
    every: int = 1
    keep_head_tokens: int = 2048
    fold_fraction: float = 0.5
    summary_tokens: int = 1024
    seed: int = 0

    def __post_init__(self) -> None:
        def bad(field: str, why: str) -> ConfigError:
            return ConfigError("fold", field, why)

        if self.from_call < 1:
            raise bad("from_call", f"must be >= 1 (call 0 has no history), got {self.from_call}")
        if self.every < 1:
            raise bad("every", f"must be >= 1, got {self.every}")
        if self.keep_head_tokens < 0:
            raise bad("keep_head_tokens", f"must be >= 0, got {self.keep_head_tokens}")
        if self.summary_tokens < 1:
            raise bad("summary_tokens", f"must be >= 1, got {self.summary_tokens}")
        if not 0 < self.fold_fraction <= 1:
            raise bad("fold_fraction", f"must be in (0, 1], got {self.fold_fraction}")

    def folds_at(self, index: int) -> bool:
        return index >= self.from_call and (index - self.from_call) % self.every == 0


def _summary_ids(spec: FoldSpec, task: str, index: int, vocab_size: int) -> np.ndarray:
    key = zlib.crc32(task.encode())
    rng = np.random.default_rng(np.random.SeedSequence([spec.seed, key, index]))
    return rng.integers(0, vocab_size, spec.summary_tokens, dtype=np.int32)


def fold_prompts(
    prompts: list[np.ndarray], task: str, spec: FoldSpec, vocab_size: int
) -> tuple[list[np.ndarray], list[bool]]:
    """One task's original prompts -> folded prompts, and whether each call folded.

    The original must only grow (each prompt extends the previous one's positions up to `cut`);
    where it rewrote its own history below the cut, folding restarts from the original.
    """
    head = spec.keep_head_tokens
    out: list[np.ndarray] = []
    folded: list[bool] = []
    summary = np.empty(0, np.int32)
    cut: int | None = None  # original position where the kept tail starts; None: not folded
    prev: np.ndarray | None = None
    for i, orig in enumerate(prompts):
        if cut is not None and prev is not None and common_prefix_len(orig, prev) < cut:
            cut, summary = None, np.empty(0, np.int32)  # the original rewrote history itself
        prev = orig
        current_len = len(orig) if cut is None else head + len(summary) + len(orig) - cut
        did = False
        if spec.folds_at(i) and len(orig) > head:
            region = current_len - head
            folded_len = int(spec.fold_fraction * region)
            if folded_len > spec.summary_tokens:
                base = head if cut is None else cut
                cut = min(len(orig), base + folded_len - len(summary))
                summary = _summary_ids(spec, task, i, vocab_size)
                did = True
        if cut is None:
            out.append(orig)
        else:
            out.append(np.concatenate([orig[:head], summary, orig[cut:]]).astype(np.int32))
        folded.append(did)
    return out, folded


def fold_trace(trace: Trace, spec: FoldSpec) -> Trace:
    """A copy of an ids trace with every task's history folded by `spec` (re-encoded as deltas).

    Outputs, gaps and dependencies are unchanged; only prompts (and so `keep`, `append`,
    `prompt_len`) change. The header's `meta["fold"]` records the spec.
    """
    h = trace.header
    if h.tokens != "ids":
        raise ConfigError(
            trace.path or "trace",
            "tokens",
            "folding rewrites token ids; this trace stores block hashes (`replay trace scale IN "
            "--tokens 1/K -o OUT` writes a token-id trace of it)",
        )
    new_calls: dict[tuple[str, int], Call] = {}
    for task in trace.task_ids:
        steps = list(trace.steps(task))
        prompts, _ = fold_prompts([s.prompt for s in steps], task, spec, h.vocab_size)
        prev_ctx = np.empty(0, np.int32)
        for step, prompt in zip(steps, prompts, strict=True):
            c = step.call
            keep = common_prefix_len(prompt, prev_ctx) if c.index > 0 else 0
            new_calls[c.ref] = replace(
                c, keep=keep, append=prompt[keep:].copy(), prompt_len=len(prompt)
            )
            prev_ctx = np.concatenate([prompt, step.output])
    meta = {**h.meta, "fold": {k: getattr(spec, k) for k in spec.__dataclass_fields__}}
    header = replace(h, meta=meta)
    return Trace(header, [new_calls[c.ref] for c in trace.calls], path=None)
