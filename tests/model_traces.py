"""Small traces for the working-set model tests, built from explicit token lists."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from replay.trace.model import Call, Trace, TraceHeader


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def make_trace(tasks: dict[str, list[tuple[list[int], list[int]]]], gaps=None) -> Trace:
    """A token-id trace from {task: [(prompt, output), ...]}: deltas against the previous context."""
    calls = []
    for task, turns in tasks.items():
        ctx: list[int] = []
        for i, (prompt, output) in enumerate(turns):
            keep = common_prefix(ctx, prompt)
            calls.append(
                Call(
                    task=task,
                    index=i,
                    gap_s=(gaps or {}).get((task, i), 0.0),
                    keep=keep,
                    append=np.array(prompt[keep:], dtype=np.int32),
                    prompt_len=len(prompt),
                    output_len=len(output),
                    output=np.array(output, dtype=np.int32),
                )
            )
            ctx = list(prompt) + list(output)
    return Trace(TraceHeader(tokens="ids", vocab_size=1000), calls)


def agent_tasks(rng: np.random.Generator, n_tasks: int, n_calls: int, head: int = 0):
    """Agent-like tasks: each call keeps its previous context and appends a tool result."""
    shared = rng.integers(0, 50, head).tolist()
    tasks = {}
    for t in range(n_tasks):
        prompt = shared + rng.integers(0, 50, int(rng.integers(1, 40))).tolist()
        turns = []
        for _ in range(n_calls):
            out = rng.integers(0, 50, int(rng.integers(1, 8))).tolist()
            turns.append((prompt, out))
            prompt = prompt + out + rng.integers(0, 50, int(rng.integers(1, 20))).tolist()
        tasks[f"t{t}"] = turns
    return tasks


def at_the_old_pace(trace: Trace) -> Trace:
    """`trace` with every gap x 6.0 / 0.64: the swe-agent preset's earlier 6 s median own time.
    The preset now follows the EfficientAgent study's 0.64 s; under that pace sixteen agents
    saturate the small devices of the model-versus-simulator tests and the model's agreement with
    the simulator is much looser (restores several times off at 0.2 GiB), which they do not cover."""
    k = 6.0 / 0.64
    return Trace(
        trace.header,
        [
            replace(
                c, gap_s=c.gap_s * k, tail_gap_s=None if c.tail_gap_s is None else c.tail_gap_s * k
            )
            for c in trace.calls
        ],
    )
