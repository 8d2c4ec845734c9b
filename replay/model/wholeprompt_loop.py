"""Predictions of llama.cpp's RAM tier for a sweep: the driver's closed loop against the server's
slots in virtual time (`simulate_closed_loop`), run totals per `--cache-ram` size
(`predict_cache_ram`), the working set (`saturation_mib`) and the transition (`halfway_mib`).

The tier's rules are in `replay.model.wholeprompt`; this module only decides when calls arrive.
Pure: service times come from a `CpuService`, never from a clock.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from replay.errors import ConfigError
from replay.model.wholeprompt import (
    MIB,
    CallOutcome,
    SimResult,
    WholePromptCache,
    WholePromptConfig,
    _PromptSource,
    simulate_order,
)
from replay.trace.model import Call, CallRef, Trace
from replay.trace.schedule import ClosedLoop, Ready, arrivals, check_pool, is_open_loop

__all__ = [
    "CpuService",
    "simulate_closed_loop",
    "predict_cache_ram",
    "saturation_mib",
    "halfway_mib",
]


@dataclass(frozen=True)
class CpuService:
    """Service time of one call on the stand-in server: fixed overhead, computed prompt tokens at
    the prefill rate, output tokens at the decode rate. The defaults are the tiny GGUF on the
    xllamacpp wheel with 2 threads (measured: ~60 us per prompt token, ~1 ms per output token)."""

    overhead_s: float = 0.004
    prefill_tokens_per_s: float = 16_000.0
    decode_tokens_per_s: float = 1_000.0

    def __post_init__(self) -> None:
        if not (
            self.overhead_s >= 0 and self.prefill_tokens_per_s > 0 and self.decode_tokens_per_s > 0
        ):
            raise ConfigError("wholeprompt model", "service", "rates must be > 0, overhead >= 0")

    def call_s(self, computed_tokens: int, output_tokens: int) -> float:
        return (
            self.overhead_s
            + computed_tokens / self.prefill_tokens_per_s
            + output_tokens / self.decode_tokens_per_s
        )


def simulate_closed_loop(
    trace: Trace,
    pool: int,
    config: WholePromptConfig,
    *,
    service: CpuService | None = None,
    gap_scale: float = 1.0,
    truncate_tokens: int | None = None,
) -> SimResult:
    """The driver's closed loop (its rules, from `replay.trace.schedule`; an open-loop trace's
    calls arrive at their times instead) against the server's slots, in virtual time. Service times depend on what each call reuses, so cache and timing are simulated together; a call that finds every server
    slot busy waits first come, first served. Calls run side by side at full speed (no CPU
    sharing): an approximation that matters only when the server is saturated."""
    if pool < 1:
        raise ConfigError("wholeprompt model", "pool", f"must be at least 1, got {pool}")
    service = service or CpuService()
    cache = WholePromptCache(config)
    source = _PromptSource(trace, truncate_tokens)
    out = SimResult(cache.totals)
    rules = ClosedLoop(trace, pool, gap_scale=gap_scale)
    open_loop = is_open_loop(trace)  # calls arrive at their times: no slots, no dependencies
    # (time, sequence, ready call | ending call): events at equal times in the order they arose
    heap: list[tuple[float, int, Ready | Call]] = []
    seq = itertools.count()
    waiting: deque[tuple[Call, np.ndarray, int]] = deque()
    running: dict[CallRef, tuple[int, np.ndarray, int, float]] = {}  # slot, prompt, out, sent
    waiting_sent: dict[CallRef, float] = {}  # waiting calls: when they were sent

    def ready(events: list[Ready]) -> None:
        for r in events:
            heapq.heappush(heap, (r.t_s, next(seq), r))

    def start(call: Call, prompt: np.ndarray, n_out: int, t_sent: float, t: float) -> None:
        a = cache.admit(prompt)
        running[call.ref] = (a.slot, prompt, n_out, t_sent)
        out.calls.append(CallOutcome(call.ref, a.slot, a.prompt_tokens, a.cached_tokens, a.source))
        t_end = t + service.call_s(a.computed_tokens, n_out)
        heapq.heappush(heap, (t_end, next(seq), call))

    if open_loop:
        ready([Ready(c, -1, t) for c, t in arrivals(trace, gap_scale)])
    else:
        ready(rules.start(0.0))
    while heap:
        t, _, item = heapq.heappop(heap)
        if isinstance(item, Ready):
            if item.call is None:
                ready(rules.free(item.slot, t))
                continue
            prompt, n_out = source.prompt(item.call.ref)
            if cache.can_admit() and not waiting:
                start(item.call, prompt, n_out, t, t)
            else:
                waiting.append((item.call, prompt, n_out))
                waiting_sent[item.call.ref] = t
            continue
        slot, prompt, n_out, t_sent = running.pop(item.ref)
        cache.release(slot, prompt, n_out, t)
        while waiting and cache.can_admit():
            w_call, w_prompt, w_out = waiting.popleft()
            start(w_call, w_prompt, w_out, waiting_sent.pop(w_call.ref), t)
        if not open_loop:
            ready(rules.ended(item.ref, t_sent, t))
    if not open_loop and not rules.finished:
        check_pool(trace, pool)  # calls wait forever: raises, naming who waits on whom
    return out


def _simulate(
    trace: Trace,
    config: WholePromptConfig,
    *,
    pool: int,
    order: Sequence[CallRef] | None,
    service: CpuService | None,
    gap_scale: float,
    truncate_tokens: int | None,
) -> SimResult:
    if order is not None:
        return simulate_order(trace, order, config, truncate_tokens)
    return simulate_closed_loop(
        trace, pool, config, service=service, gap_scale=gap_scale, truncate_tokens=truncate_tokens
    )


def predict_cache_ram(
    trace: Trace,
    *,
    pool: int,
    slots: int,
    cache_ram_mib: Sequence[int],
    bytes_per_token: float,
    entry_overhead_bytes: float = 0.0,
    ctx_tokens: int = 0,
    order: Sequence[CallRef] | None = None,
    service: CpuService | None = None,
    gap_scale: float = 1.0,
    truncate_tokens: int | None = None,
) -> list[dict]:
    """Predicted run totals for each `--cache-ram` size (MiB): the closed loop of `pool` agents in
    virtual time, or, with `order`, the calls one at a time in that order."""
    rows = []
    for mib in cache_ram_mib:
        cfg = WholePromptConfig(slots, int(mib), bytes_per_token, entry_overhead_bytes, ctx_tokens)
        totals = _simulate(
            trace,
            cfg,
            pool=pool,
            order=order,
            service=service,
            gap_scale=gap_scale,
            truncate_tokens=truncate_tokens,
        ).totals
        rows.append({"cache_ram_mib": int(mib), **totals.to_dict()})
    return rows


def saturation_mib(
    trace: Trace,
    *,
    pool: int,
    slots: int,
    bytes_per_token: float,
    entry_overhead_bytes: float = 0.0,
    order: Sequence[CallRef] | None = None,
    service: CpuService | None = None,
    gap_scale: float = 1.0,
    truncate_tokens: int | None = None,
) -> tuple[int, int, int]:
    """(smallest whole MiB whose computed prefill equals that of an unbounded tier, that floor,
    the computed prefill with the tier off): the working set of this tier for this trace, in
    the unit `--cache-ram` takes. Bisection: it assumes more RAM never computes more; FIFO
    eviction can break that in places, so callers that care check the neighbours."""

    def computed(mib: int) -> int:
        cfg = WholePromptConfig(slots, mib, bytes_per_token, entry_overhead_bytes)
        return _simulate(
            trace,
            cfg,
            pool=pool,
            order=order,
            service=service,
            gap_scale=gap_scale,
            truncate_tokens=truncate_tokens,
        ).totals.computed_prefill_tokens

    all_tokens = trace.prompt_tokens + trace.output_tokens
    every_entry = all_tokens * bytes_per_token + len(trace) * (entry_overhead_bytes + 1)
    hi = int(np.ceil(every_entry / MIB)) + 1  # holds every sequence ever made: nothing evicted
    floor = computed(hi)
    off = computed(0)
    lo = 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if computed(mid) <= floor:
            hi = mid
        else:
            lo = mid
    return hi, floor, off


def halfway_mib(mibs: Sequence[float], computed: Sequence[float]) -> float | None:
    """Where computed prefill first falls halfway from its value at the smallest size to its
    value at the largest (linear between grid points): one number for "where the transition is".
    None when the curve does not fall at all."""
    if len(mibs) != len(computed) or len(mibs) < 2:
        raise ConfigError("wholeprompt model", "mibs", "need two or more (size, prefill) points")
    pairs = sorted(zip(mibs, computed, strict=True))
    top, bottom = float(pairs[0][1]), float(pairs[-1][1])
    if not top > bottom:
        return None
    half = (top + bottom) / 2
    for (m0, c0), (m1, c1) in itertools.pairwise(pairs):
        if c0 > half >= c1:
            return float(m0 + (m1 - m0) * (c0 - half) / (c0 - c1))
    return None
