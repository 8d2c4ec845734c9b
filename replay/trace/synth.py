"""Seeded synthetic agent traces (token ids) with presets calibrated to published statistics.

A task's first prompt is an optional shared head (tools + system prompt, equal across tasks) plus
task-specific tokens; every later call keeps the whole previous context (prompt + output) and
appends a tool result, so a prompt is stored as the few tokens it adds. A task ends at its drawn
call count or before a prompt would exceed the context limit. Each task draws from its own
`numpy.random.Generator` seeded by (seed, task number): a trace with more tasks starts with the
same tasks as one with fewer.

Knobs for small test traces: `scale` multiplies every token length (0.02 turns a 33K-token mean
prompt into ~700 tokens), `max_prompt_tokens` caps every prompt (tasks end early), and
`max_calls_per_task` caps calls per task. Example, a few thousand tokens per call:

    synth("swe-agent", tasks=4, seed=1, scale=0.05, max_calls_per_task=6)

The presets and their sources live in `replay.trace.synth_presets` (re-exported here).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from replay.errors import ConfigError
from replay.trace.model import MAX_VOCAB_SIZE, Call, Trace, TraceHeader
from replay.trace.synth_presets import PRESETS, LogNormal, SynthPreset, get_preset

__all__ = ["LogNormal", "SynthPreset", "PRESETS", "synth", "check_synth_args", "get_preset"]

_GOLDEN = (math.sqrt(5) - 1) / 2
_HEAD_STREAM = 0x4EAD  # seed-sequence key of the shared head, apart from task streams
_SUB_HEAD_STREAM = 0x5B4EAD
_EDIT_STREAM = (
    0xED17  # per-task key of the context-edit draws, so the other draws stay as they were
)


def _rng(seed: int, *stream: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, *stream]))


def _lengths(
    p: SynthPreset,
    rng: np.random.Generator,
    calls: LogNormal,
    first: LogNormal,
    head: int,
    scale: float,
    max_ctx: int,
    max_calls: int | None,
    calls_u: float | None = None,
    edit_rng: np.random.Generator | None = None,
) -> tuple[list[int], list[int], list[int], list[int]]:
    """Prompt lengths, appended lengths, output lengths and kept prefixes of one task's calls.

    `calls_u` in (0, 1) picks the task's call count as a quantile: root tasks take successive
    points of a golden-ratio sequence, so any number of tasks covers the distribution evenly and
    a trace's totals (which grow with the square of calls per task) vary little between seeds.
    A call keeps the whole previous context (prompt + output) unless `edit_rng` draws a context
    edit for it (`SynthPreset.edit_prob`): it then keeps the context up to the elided tool result.
    """
    n = int(round(calls.quantile(calls_u) if calls_u is not None else calls.draw(rng)))
    if max_calls is not None:
        n = min(n, max_calls)
    n = max(n, 1)
    outs = np.maximum(1, np.rint(p.output_tokens.draw(rng, n, scale))).astype(int)
    tools = np.maximum(1, np.rint(p.tool_result_tokens.draw(rng, n, scale))).astype(int)
    first_len = int(round(first.draw(rng, scale=scale)))
    first_len = max(first_len, head + max(1, int(32 * scale)))
    if outs[0] > max_ctx - head:  # a first prompt shorter than the shared head it starts with
        outs[0] = max(1, max_ctx - head)
    first_len = min(first_len, max(1, max_ctx - int(outs[0])))
    prompts, appends, outputs, keeps = [first_len], [first_len], [int(outs[0])], [0]
    # the context as segments: first prompt, then output and tool result of each call
    segs, tool_at = [first_len, int(outs[0])], [-1]
    placeholder = max(1, int(round(p.edit_placeholder_tokens * scale)))
    for i in range(1, n):
        keep = sum(segs)
        if edit_rng is not None and p.edit_prob and edit_rng.random() < p.edit_prob:
            j = i - p.edit_back_turns
            if j >= 1 and segs[tool_at[j]] > placeholder:
                keep = sum(segs[: tool_at[j]])
                segs[tool_at[j]] = placeholder
        nxt = sum(segs) + int(tools[i])
        if nxt + int(outs[i]) > max_ctx:
            break
        tool_at.append(len(segs))
        segs += [int(tools[i]), int(outs[i])]
        prompts.append(nxt)
        appends.append(nxt - keep)
        outputs.append(int(outs[i]))
        keeps.append(keep)
    return prompts, appends, outputs, keeps


def _task_calls(
    task: str,
    prompts: list[int],
    appends: list[int],
    outputs: list[int],
    keeps: list[int],
    gaps: np.ndarray,
    head: np.ndarray,
    rng: np.random.Generator,
    vocab_size: int,
    first_gap_s: float,
) -> list[Call]:
    calls = []
    for i, (plen, alen, olen) in enumerate(zip(prompts, appends, outputs, strict=True)):
        if i == 0:
            own = rng.integers(0, vocab_size, plen - len(head), dtype=np.int32)
            append = np.concatenate([head, own]) if len(head) else own
        else:
            # after an edit the rest of the context is sent again: fresh ids stand for it, as its
            # KV has to be computed again whatever its content
            append = rng.integers(0, vocab_size, alen, dtype=np.int32)
        calls.append(
            Call(
                task=task,
                index=i,
                gap_s=first_gap_s if i == 0 else round(float(gaps[i]), 3),
                keep=keeps[i],
                append=append,
                prompt_len=plen,
                output_len=olen,
            )
        )
    return calls


MAX_SYNTH_TASKS = 10_000
MAX_SEED = (1 << 63) - 1


def check_synth_args(
    tasks: int,
    seed: int,
    shared_head_tokens: int | None,
    vocab_size: int,
    scale: float,
    max_prompt_tokens: int | None,
    max_calls_per_task: int | None,
) -> None:
    """`synth`'s argument ranges: ConfigError("synth", ARGUMENT, why). An experiment file's
    `[trace] synth` is checked with it when the file loads, before any sweep starts."""
    if tasks <= 0:
        raise ConfigError("synth", "tasks", f"must be positive, got {tasks}")
    if tasks > MAX_SYNTH_TASKS:  # else it ran for hours holding a sweep's lock, then filled a disk
        raise ConfigError(
            "synth", "tasks",
            f"must be at most {MAX_SYNTH_TASKS:,}, got {tasks:,} (about 10 ms and 0.1 MB a "
            "swe-agent task); merge several traces for more",
        )  # fmt: skip
    if not 0 <= seed <= MAX_SEED:  # numpy's seeding takes no negative seed; meta is 64-bit JSON
        raise ConfigError("synth", "seed", f"must be in [0, 2^63 - 1], got {seed}")
    if not (scale > 0 and math.isfinite(scale)):
        raise ConfigError("synth", "scale", f"must be a positive number, got {scale}")
    if not 2 <= vocab_size <= MAX_VOCAB_SIZE:
        raise ConfigError(
            "synth", "vocab_size", f"must be in [2, 2^31] (ids are 32-bit), got {vocab_size}"
        )
    if max_prompt_tokens is not None and max_prompt_tokens < 2:
        raise ConfigError("synth", "max_prompt_tokens", f"must be >= 2, got {max_prompt_tokens}")
    if max_calls_per_task is not None and max_calls_per_task < 1:
        raise ConfigError("synth", "max_calls_per_task", f"must be >= 1, got {max_calls_per_task}")
    if shared_head_tokens is not None and shared_head_tokens < 0:
        raise ConfigError("synth", "shared_head_tokens", f"must be >= 0, got {shared_head_tokens}")


def synth(
    preset: str,
    tasks: int | None = None,
    seed: int = 0,
    shared_head_tokens: int | None = None,
    vocab_size: int = 32000,
    *,
    scale: float = 1.0,
    max_prompt_tokens: int | None = None,
    max_calls_per_task: int | None = None,
    model: str | None = None,
) -> Trace:
    """A deterministic synthetic trace of `tasks` root tasks (default: the preset's).

    `shared_head_tokens` overrides the preset's shared head (0 = none; the value is used as is,
    not scaled). `scale`, `max_prompt_tokens`, `max_calls_per_task`: see the module docstring.
    Sub-agent tasks (claude-code) follow their parent task and are not counted in `tasks`.
    """
    p = get_preset(preset)
    n_tasks = p.default_tasks if tasks is None else tasks
    check_synth_args(
        n_tasks, seed, shared_head_tokens, vocab_size, scale, max_prompt_tokens, max_calls_per_task
    )
    head_len = int(round(p.shared_head_tokens * scale))
    if shared_head_tokens is not None:
        head_len = shared_head_tokens
    max_ctx = max(2, int(p.max_context_tokens * scale))
    if max_prompt_tokens is not None:
        max_ctx = min(max_ctx, max_prompt_tokens)
    head_len = min(head_len, max_ctx // 2)
    head = _rng(seed, _HEAD_STREAM).integers(0, vocab_size, head_len, dtype=np.int32)
    sub_head_len = min(int(round(p.subagent_head_tokens * scale)), max_ctx // 2)
    sub_head = _rng(seed, _SUB_HEAD_STREAM).integers(0, vocab_size, sub_head_len, dtype=np.int32)

    all_calls: list[Call] = []
    u0 = float(_rng(seed, _HEAD_STREAM, 1).random())
    for t in range(n_tasks):
        rng = _rng(seed, t)
        calls_u = min(max((u0 + t * _GOLDEN) % 1.0, 1e-6), 1 - 1e-6)
        task = f"{p.name}-{t:04d}"
        edit_rng = _rng(seed, t, _EDIT_STREAM)
        prompts, appends, outputs, keeps = _lengths(
            p,
            rng,
            p.calls_per_task,
            p.first_prompt_tokens,
            head_len,
            scale,
            max_ctx,
            max_calls_per_task,
            calls_u,
            edit_rng,
        )
        gaps = p.gap_s.draw(rng, len(prompts))
        calls = _task_calls(
            task, prompts, appends, outputs, keeps, gaps, head, rng, vocab_size, p.first_gap_s
        )
        subs: list[Call] = []
        if p.subagent_prob and len(calls) >= 2 and rng.random() < p.subagent_prob:
            calls, subs = _spawn(p, task, calls, rng, sub_head, scale, max_ctx, vocab_size)
        calls[-1] = replace(calls[-1], tail_gap_s=round(float(p.gap_s.draw(rng)), 3))
        all_calls.extend(calls)
        all_calls.extend(subs)
    header = TraceHeader(
        tokens="ids",
        vocab_size=vocab_size,
        model=model,
        source=f"synth:{p.name}",
        meta={
            "preset": p.name,
            "tasks": n_tasks,
            "seed": seed,
            "scale": scale,
            "shared_head_tokens": head_len,
            "max_prompt_tokens": max_prompt_tokens,
            "max_calls_per_task": max_calls_per_task,
        },
    )
    return Trace(header, all_calls)


def _spawn(
    p: SynthPreset,
    task: str,
    calls: list[Call],
    rng: np.random.Generator,
    sub_head: np.ndarray,
    scale: float,
    max_ctx: int,
    vocab_size: int,
) -> tuple[list[Call], list[Call]]:
    """Spawn parallel sub-agents after one parent call; the parent's next call joins them.

    The parent's next call appends the sub-agents' reports to its context (as tool results do);
    its gap is measured from the last sub-agent's end, as `gap_s` always is from dependencies.
    """
    assert p.subagent_calls is not None and p.subagent_first_prompt_tokens is not None
    k = int(rng.integers(0, len(calls) - 1))  # spawned after call k, joined by call k + 1
    lo, hi = p.subagents_per_spawn
    n_sub = int(rng.integers(lo, hi + 1))
    subs: list[Call] = []
    joins = []
    for j in range(n_sub):
        sub_task = f"{task}.sub{j}"
        prompts, appends, outputs, keeps = _lengths(
            p,
            rng,
            p.subagent_calls,
            p.subagent_first_prompt_tokens,
            len(sub_head),
            scale,
            max_ctx,
            None,
        )
        gaps = p.gap_s.draw(rng, len(prompts))
        sc = _task_calls(
            sub_task, prompts, appends, outputs, keeps, gaps, sub_head, rng, vocab_size, 0.5
        )
        sc[0] = replace(sc[0], parent=(task, k))
        subs.extend(sc)
        joins.append((sub_task, sc[-1].index))
    calls = list(calls)
    calls[k + 1] = replace(calls[k + 1], after=tuple(joins))
    return calls, subs
