"""The `vllm` personality admits a waiting request only when its whole prompt fits in free blocks.

vLLM 0.32's scheduler (vllm/v1/core/sched/scheduler.py) admits waiting requests first come first
served; `KVCacheManager.allocate_slots` (vllm/v1/core/kv_cache_manager.py) refuses one unless
the blocks of its full sequence, counting prefix hits that sit evictable in the free queue, fit in
the free blocks (`scheduler_reserve_full_isl`, on by default), and a refusal stops admission for
that step. One block of the pool is the null block. So with a small cache a free seat is not
enough: the request waits for a running one to finish, and the batch is smaller.
"""

from __future__ import annotations

import asyncio

import pytest

from replay.clock import run_virtual
from replay.protocol import CompletionRequest
from replay.sim.options import SimConfig
from replay.sim.transport import SimTransport
from tests.sim_helpers import tokens

MIB = 1 / 1024  # GiB


def _pair(cfg: SimConfig, prompt_tokens: int, output_tokens: int):
    """Two different prompts sent together: their (t_first_token, t_end) and the counters."""

    async def main():
        sim = SimTransport(cfg, debug=True)
        reqs = [
            CompletionRequest(f"t{i}", 0, tokens(40 + i, prompt_tokens), output_tokens)
            for i in range(2)
        ]
        rs = await asyncio.gather(*(sim.complete(r) for r in reqs))
        await sim.close()
        return [(r.t_first_token, r.t_end) for r in rs], sim.counters()

    return run_virtual(main)


def _cfg(kv_mib: float, personality: str = "vllm") -> SimConfig:
    # the CPU sweep's engine: tiny Llama (1 KiB of KV a token), 128-token blocks, three seats
    return SimConfig(
        model="tiny-llama",
        tp=1,
        block_tokens=128,
        chunk_tokens=128,
        device_kv_gib=kv_mib * MIB,
        max_num_seqs=3,
        personality=personality,
    )


def test_a_free_seat_is_not_enough_the_prompt_must_fit_in_free_blocks():
    # 3 MiB = 24 blocks, 23 usable; each 1,536-token prompt needs 12: the second waits
    (a_first, a_end), (b_first, _) = _pair(_cfg(3), 1536, 16)[0]
    assert a_first < a_end <= b_first


def test_with_room_for_both_prompts_they_run_together():
    # 8 MiB = 63 usable blocks: both are admitted in the first step
    times, c = _pair(_cfg(8), 1536, 16)
    (a_first, a_end), (b_first, b_end) = times
    assert b_first < a_end and a_first < b_end
    assert c["preemptions"] == 0


@pytest.mark.parametrize("personality", ["reference", "vllm"])
def test_the_null_block_decides_at_the_boundary(personality):
    # 24 blocks hold both 12-block prompts only without vLLM's null block
    (a_first, a_end), (b_first, _) = _pair(_cfg(3, personality), 1536, 16)[0]
    together = b_first < a_end
    assert together == (personality == "reference")
