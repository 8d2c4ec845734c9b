"""Working-set model of llama.cpp's RAM prompt cache (`--cache-ram`) over a given order of calls.

The tier's rules (slots, whole-prompt RAM entries, what a request reuses) are in
`replay.model.wholeprompt_cache`, whose names this module re-exports. Here a trace's calls go
through it in a given order (`simulate_order`, each call ending before the next) or at given
send/end times (`simulate_timed`, e.g. a recorded run's), which decides which calls share a slot.

`replay.model.wholeprompt_loop` adds the closed loop in virtual time and the sweep predictions.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from replay.errors import ConfigError
from replay.model.wholeprompt_cache import (
    MIB,
    Admission,
    Totals,
    WholePromptCache,
    WholePromptConfig,
)
from replay.trace.model import CallRef, Trace

__all__ = [
    "MIB",
    "WholePromptConfig",
    "Admission",
    "CallOutcome",
    "WholePromptCache",
    "Totals",
    "simulate_order",
    "simulate_timed",
    "SimResult",
]


@dataclass(frozen=True)
class CallOutcome:
    """What one call found, in the order calls were admitted."""

    ref: CallRef
    slot: int
    prompt_tokens: int
    cached_tokens: int
    source: str | None


@dataclass
class SimResult:
    totals: Totals
    calls: list[CallOutcome] = field(default_factory=list)


class _PromptSource:
    """Expanded prompts of the calls in any order that keeps each task's calls in sequence."""

    def __init__(self, trace: Trace, truncate_tokens: int | None = None):
        self.trace = trace
        self.truncate = truncate_tokens
        self._iters: dict[str, Iterator] = {}

    def prompt(self, ref: CallRef) -> tuple[np.ndarray, int]:
        task, index = ref
        it = self._iters.get(task)
        if it is None:
            it = self._iters[task] = iter(self.trace.steps(task))
        for step in it:
            if step.call.index == index:
                p = np.asarray(step.prompt, dtype=np.int64)
                if self.truncate is not None:
                    p = p[: self.truncate]
                return p, step.call.output_len
        raise ConfigError("wholeprompt model", "order", f"call {ref} out of task order or unknown")


def simulate_order(
    trace: Trace,
    order: Sequence[CallRef],
    config: WholePromptConfig,
    truncate_tokens: int | None = None,
) -> SimResult:
    """Calls one after another in `order`, each ending before the next starts (a server that is
    idle whenever a call arrives: gaps long against service times)."""
    cache = WholePromptCache(config)
    source = _PromptSource(trace, truncate_tokens)
    out = SimResult(cache.totals)
    for t, ref in enumerate(order):
        prompt, n_out = source.prompt(ref)
        a = cache.admit(prompt)
        out.calls.append(CallOutcome(ref, a.slot, a.prompt_tokens, a.cached_tokens, a.source))
        cache.release(a.slot, prompt, n_out, float(t))
    return out


def simulate_timed(
    trace: Trace,
    events: Sequence[tuple[CallRef, float, float]],
    config: WholePromptConfig,
    truncate_tokens: int | None = None,
) -> SimResult:
    """Calls with their (send, end) times, e.g. a recorded run's: releases before sends at equal
    times; a call that finds every slot busy waits (first come, first served) for a release.

    Calls ending at the same time ended in one engine step: the server releases every slot of the
    step before it serves a waiting call (`update_slots` releases them; the deferred tasks are
    served on the next pass of the task queue), so a waiting call chooses among all of them."""
    cache = WholePromptCache(config)
    source = _PromptSource(trace, truncate_tokens)
    out = SimResult(cache.totals)
    timeline = []
    for k, (ref, t_send, t_end) in enumerate(events):
        timeline.append((float(t_send), 1, k, ref))
        timeline.append((float(t_end), 0, k, ref))
    timeline.sort(key=lambda e: (e[0], e[1], e[2]))
    waiting: deque[tuple[CallRef, np.ndarray, int]] = deque()
    running: dict[CallRef, tuple[int, np.ndarray, int]] = {}
    ended: set[CallRef] = set()

    def start(ref: CallRef, prompt: np.ndarray, n_out: int) -> None:
        a = cache.admit(prompt)
        running[ref] = (a.slot, prompt, n_out)
        out.calls.append(CallOutcome(ref, a.slot, a.prompt_tokens, a.cached_tokens, a.source))

    def release_follows(i: int) -> bool:
        """Another release at the same time comes next (one step freed both)."""
        nxt = timeline[i + 1] if i + 1 < len(timeline) else None
        return nxt is not None and nxt[0] == timeline[i][0] and nxt[1] == 0

    for i, (t, kind, _, ref) in enumerate(timeline):
        if kind == 1:
            prompt, n_out = source.prompt(ref)
            if cache.can_admit() and not waiting:
                start(ref, prompt, n_out)
            else:
                waiting.append((ref, prompt, n_out))
            continue
        if ref not in running:
            ended.add(ref)  # its end time came before the slot freed up: it ends when it starts
            continue
        slot, prompt, n_out = running.pop(ref)
        cache.release(slot, prompt, n_out, t)
        if release_follows(i):
            continue  # the server frees every slot a step finished before it serves a waiting task
        while waiting and cache.can_admit():
            w_ref, w_prompt, w_out = waiting.popleft()
            start(w_ref, w_prompt, w_out)
            if w_ref in ended:
                w_slot, _, _ = running.pop(w_ref)
                cache.release(w_slot, w_prompt, w_out, t)
    return out
