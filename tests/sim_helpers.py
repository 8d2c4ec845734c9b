"""Helpers for the simulator tests: drive SimTransport on a virtual loop without the driver
(`closed_loop`), or replay a trace through the real driver onto the simulator (`replay_on_sim`)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np

from replay.clock import run_virtual
from replay.driver.options import RunOptions
from replay.driver.run import run_replay
from replay.protocol import CompletionRequest, CompletionResult
from replay.sim.options import SimConfig
from replay.sim.transport import SimTransport
from replay.trace.model import Trace


def tokens(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 32000, n).astype(np.int32)


def closed_loop(
    trace: Trace, cfg: SimConfig, pool: int, stretch: bool = True
) -> tuple[dict, list[dict], float]:
    """A minimal closed loop (pool slots take tasks in order; gap, then send) for engine tests:
    returns (counters, per-call rows, makespan). The real driver is tested elsewhere."""

    async def main():
        sim = SimTransport(cfg, vocab_size=trace.header.vocab_size, debug=True, stretch=stretch)
        await sim.start()
        todo = list(trace.task_ids)
        rows: list[dict] = []

        async def slot() -> None:
            while todo:
                task = todo.pop(0)
                for st in trace.steps(task):
                    await asyncio.sleep(st.call.gap_s)
                    req = CompletionRequest(
                        task, st.call.index, st.prompt, len(st.output), forced_output=st.output
                    )
                    r: CompletionResult = await sim.complete(req)
                    rows.append(
                        {
                            "task": task,
                            "call": st.call.index,
                            "t_end": r.t_end,
                            "t_first": r.t_first_token,
                            "cached": r.cached_tokens,
                            "by_source": r.cached_by_source,
                            "prompt": r.prompt_tokens,
                            "completion": r.completion_tokens,
                        }
                    )

        try:
            await asyncio.gather(*(slot() for _ in range(pool)))
        finally:
            await sim.close()
        makespan = max(r["t_end"] for r in rows)
        return sim.counters(), rows, makespan

    return run_virtual(main)


def replay_on_sim(trace: Trace, cfg: SimConfig, options: RunOptions, out: Path) -> dict:
    """`replay run --engine sim` in-process: `trace` through the driver onto a simulator built
    from `cfg`, in virtual time, its files written to `out`; the run's summary, with the
    simulator's counters in it."""
    box: dict[str, SimTransport] = {}

    def factory() -> SimTransport:
        box["t"] = SimTransport(cfg, vocab_size=trace.header.vocab_size)
        return box["t"]

    return run_replay(
        trace, factory, options, out, virtual=True, counters_fn=lambda: box["t"].counters()
    )
