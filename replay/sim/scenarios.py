"""The explainer's scenario on the simulator: long sessions taking turns on one device.

Sessions run round robin, one call at a time (session 1 turn 0, session 2 turn 0, ..., session 1
turn 1, ...), so only the device tier's capacity and eviction granularity decide what hits. Used by
tests, the benchmark figure and docs/simulator.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from replay.clock import run_virtual
from replay.protocol import CompletionRequest
from replay.sim.options import SimConfig
from replay.sim.transport import SimTransport
from replay.trace.model import Trace

__all__ = ["EXPLAINER_CONFIG", "explainer_trace", "round_robin"]

# Llama-3-70B on four A100s priced as the explainer does (peak 2 FLOPs/parameter/token, no
# attention term), 180 GB = 167.6 GiB of KV.
EXPLAINER_CONFIG = SimConfig(
    hardware="explainer-4xa100",
    model="llama-3-70b",
    tp=1,
    device_kv_gib=167.6,
    host_tier_gib=0.0,
    efficiency=1.0,
    attention_flops=False,
    max_num_batched_tokens=8192,
)


def explainer_trace(sessions: int, seed: int = 0) -> Trace:
    """`synth --preset explainer` with `sessions` tasks."""
    from replay.trace.synth import synth

    return synth("explainer", tasks=sessions, seed=seed)


def round_robin(trace: Trace, config: SimConfig, **overrides: Any) -> list[dict]:
    """Replay the trace's tasks in turns, one call in flight; one record per call."""
    cfg = dataclasses.replace(config, **overrides) if overrides else config
    steps = {t: list(trace.steps(t)) for t in trace.task_ids}
    turns = max(len(v) for v in steps.values())

    async def main() -> list[dict]:
        sim = SimTransport(cfg, vocab_size=trace.header.vocab_size)
        await sim.start()
        rows = []
        try:
            for turn in range(turns):
                for task, ss in steps.items():
                    if turn >= len(ss):
                        continue
                    st = ss[turn]
                    req = CompletionRequest(
                        task, st.call.index, st.prompt, len(st.output), forced_output=st.output
                    )
                    t0 = sim.engine_time()
                    r = await sim.complete(req)
                    assert r.cached_by_source is not None and r.t_first_token is not None
                    rows.append(
                        {
                            "task": task,
                            "turn": turn,
                            "prompt_tokens": r.prompt_tokens,
                            "device_hit_tokens": r.cached_by_source["device"],
                            "host_restore_tokens": r.cached_by_source["host"],
                            "ttft_s": r.t_first_token - t0,
                        }
                    )
        finally:
            await sim.close()
        return rows

    return run_virtual(main)
