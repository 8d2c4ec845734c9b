"""The explainer's scenario: Llama-3-70B on four A100s (priced as A100 40GB) with 180 GB of KV and
88K-token sessions taking turns. Its stated costs (device hit ~0, host restore ~2.5 s, recompute
~10 s) and its closing remark (whole-session eviction falls off a cliff at the sixth session, a
paged cache degrades gently) are the oracles."""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np
import pytest

from replay.clock import run_virtual
from replay.protocol import CompletionRequest
from replay.sim.scenarios import EXPLAINER_CONFIG, explainer_trace, round_robin
from replay.sim.transport import SimTransport
from tests.sim_helpers import tokens


def hit_rate_by_turn(rows: list[dict]) -> list[float]:
    by: dict[int, list[float]] = {}
    for r in rows:
        by.setdefault(r["turn"], []).append(r["device_hit_tokens"] / r["prompt_tokens"])
    return [float(np.mean(v)) for _, v in sorted(by.items())]


@pytest.fixture(scope="module")
def six():
    return explainer_trace(6)


def test_device_capacity_is_180_gb_of_llama_70b_kv():
    assert EXPLAINER_CONFIG.bytes_per_token == 320 * 1024
    tokens_held = EXPLAINER_CONFIG.device_blocks * 16
    assert 540_000 < tokens_held <= 180e9 / (320 * 1024)  # ~549K tokens: five 110K sessions


def test_hit_restore_and_recompute_cost_what_the_explainer_says():
    cfg = dataclasses.replace(
        EXPLAINER_CONFIG, device_kv_gib=40, host_tier_gib=100, device_eviction="session"
    )
    p0, out = tokens(0, 88_000), tokens(1, 413)
    nxt = np.concatenate([p0, out, tokens(2, 1000)])

    async def main():
        sim = SimTransport(cfg, debug=True)
        t = sim.engine_time()
        r = await sim.complete(CompletionRequest("a", 0, p0, 413, forced_output=out))
        recompute = r.t_first_token - t
        t = sim.engine_time()
        r = await sim.complete(CompletionRequest("a", 1, nxt, 1))
        hit = r.t_first_token - t
        assert r.cached_by_source["host"] == 0
        # another session pushes "a" out of the 40 GiB device (it stays in the host tier)
        await sim.complete(CompletionRequest("b", 0, tokens(3, 100_000), 1))
        await asyncio.sleep(10)  # b's host writes (~2.7 s of link time) are done
        t = sim.engine_time()
        r = await sim.complete(CompletionRequest("a", 2, nxt, 1))
        restore = r.t_first_token - t
        await sim.close()
        return recompute, hit, restore, r.cached_by_source

    recompute, hit, restore, by_source = run_virtual(main)
    assert 9.0 < recompute < 11.0  # 2 * 70.6e9 * 88K FLOPs at 4 x 312 TFLOP/s
    assert hit < 0.3  # only the ~1.4K new tokens are computed
    assert by_source["device"] < 1000 and by_source["host"] > 87_000
    assert 2.2 < restore < 2.9  # 88K x 320 KiB over 12 GB/s, plus the new tokens


def test_five_sessions_keep_hitting_in_both_modes():
    five = explainer_trace(5)
    for mode in ("block", "session"):
        rates = hit_rate_by_turn(round_robin(five, EXPLAINER_CONFIG, device_eviction=mode))
        assert min(rates[1:]) > 0.98, mode


def test_sixth_session_is_a_cliff_for_session_eviction_and_gentle_for_blocks(six):
    session = hit_rate_by_turn(round_robin(six, EXPLAINER_CONFIG, device_eviction="session"))
    block = hit_rate_by_turn(round_robin(six, EXPLAINER_CONFIG, device_eviction="block"))
    assert session[1] > 0.98 and block[1] > 0.98  # six 88K sessions still fit at first
    assert max(session[4:]) == 0.0  # once they do not: every call misses entirely
    assert all(b > s for b, s in zip(block[3:], session[3:], strict=True))
    assert block[4] > 0.85  # a paged cache loses tails only
    assert all(x >= y - 1e-9 for x, y in zip(block[1:], block[2:], strict=False))  # smooth fall


def test_a_host_tier_turns_the_cliff_into_restores(six):
    rows = round_robin(six, EXPLAINER_CONFIG, device_eviction="session", host_tier_gib=1000)
    late = [r for r in rows if r["turn"] >= 5]
    assert all(r["host_restore_tokens"] > 0.9 * r["prompt_tokens"] for r in late)
    assert all(2.5 < r["ttft_s"] < 3.5 for r in late)  # ~105K tokens at 12 GB/s, not ~12 s


def test_host_writes_delay_a_restore_that_follows_them_on_the_link():
    cfg = dataclasses.replace(
        EXPLAINER_CONFIG, device_kv_gib=40, host_tier_gib=100, device_eviction="session"
    )
    p0 = tokens(0, 88_000)

    def restore_after(wait_s: float) -> float:
        async def main():
            sim = SimTransport(cfg)
            await sim.complete(CompletionRequest("a", 0, p0, 1))
            await asyncio.sleep(10)
            await sim.complete(CompletionRequest("b", 0, tokens(3, 100_000), 1))
            await asyncio.sleep(wait_s)
            t = sim.engine_time()
            r = await sim.complete(CompletionRequest("a", 1, p0, 1))
            await sim.close()
            return r.t_first_token - t

        return run_virtual(main)

    write_b_s = 100_000 // 256 * 256 * 320 * 1024 / 12e9
    assert restore_after(0.0) - restore_after(10.0) == pytest.approx(write_b_s, rel=0.01)
