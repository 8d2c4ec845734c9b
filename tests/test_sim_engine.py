"""Simulator engine: timing from first principles, determinism, tiers, policies, preemption."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math

import numpy as np
import pytest

from replay.clock import run_virtual
from replay.errors import RequestFailed
from replay.model.presets import HARDWARE, MODELS
from replay.protocol import CompletionRequest
from replay.sim.options import SimConfig
from replay.sim.transport import SimTransport
from replay.trace.io import read_trace
from replay.trace.model import Trace
from replay.trace.synth import synth
from tests.sim_helpers import closed_loop, tokens

SMALL = SimConfig(device_kv_gib=0.08, chunk_tokens=64)


@pytest.fixture(scope="module")
def small_trace():
    return synth("swe-agent", tasks=12, seed=3, scale=0.05, max_calls_per_task=10)


def one(cfg: SimConfig, prompt: np.ndarray, n_out: int):
    async def main():
        sim = SimTransport(cfg, debug=True)
        try:
            return await sim.complete(CompletionRequest("t", 0, prompt, n_out))
        finally:
            await sim.close()

    return run_virtual(main)


# Llama-3-8B on one H100 at full efficiency, no attention term: step times by hand
ROOFLINE = SimConfig(
    hardware="h100",
    model="llama-3-8b",
    tp=1,
    device_kv_gib=4,
    efficiency=1.0,
    attention_flops=False,
)


def test_prefill_and_decode_times_follow_the_roofline():
    # a 4096-token prefill is compute bound at 2 FLOPs per parameter per token; each decode
    # step streams the weights plus the KV so far.
    cfg = ROOFLINE
    hw, m = HARDWARE["h100"], MODELS["llama-3-8b"]
    n, out = 4096, 11
    r = one(cfg, tokens(0, n), out)
    assert r.t_first_token == pytest.approx(2 * 8.0e9 * n / hw.peak_flops, rel=1e-9)
    kv_per_token = 2 * 32 * 128 * 2 * 8  # K and V, layers, head dim, BF16, KV heads
    decode = sum((2 * 8.0e9 + (n + i) * kv_per_token) / hw.hbm_bytes_per_s for i in range(out - 1))
    assert r.t_end - r.t_first_token == pytest.approx(decode, rel=1e-9)
    assert (r.prompt_tokens, r.completion_tokens, r.cached_tokens) == (n, out, 0)
    assert m.bytes_per_token(1) == kv_per_token


def test_attention_term_adds_causal_quadratic_flops():
    cfg = SimConfig(
        hardware="h100",
        model="llama-3-8b",
        tp=1,
        device_kv_gib=4,
        efficiency=0.5,
        max_num_batched_tokens=2048,
    )
    n = 2048
    r = one(cfg, tokens(1, n), 1)
    flops = 2 * 8.0e9 * n + 4 * 32 * 32 * 128 * n * (n + 1) / 2
    assert r.t_first_token == pytest.approx(flops / (0.5 * HARDWARE["h100"].peak_flops), rel=1e-9)


def test_second_call_hits_the_device_prefix_including_the_previous_output():
    cfg = SimConfig(device_kv_gib=1)
    p0 = tokens(2, 1000)
    out0 = tokens(3, 50)

    async def main():
        sim = SimTransport(cfg, debug=True)
        r0 = await sim.complete(CompletionRequest("a", 0, p0, 50, forced_output=out0))
        p1 = np.concatenate([p0, out0, tokens(4, 100)])
        r1 = await sim.complete(CompletionRequest("a", 1, p1, 5))
        await sim.close()
        return r0, r1, sim.counters()

    r0, r1, c = run_virtual(main)
    assert r0.cached_tokens == 0
    # KV holds prompt + output minus the last output token: 1049 tokens -> 65 full blocks
    assert r1.cached_by_source == {"device": 65 * 16, "host": 0}
    assert c["prompt_tokens"] == 2150
    assert c["computed_prefill_tokens"] == 2150 - 65 * 16


def test_same_trace_config_and_seed_give_identical_results(small_trace):
    cfg = dataclasses.replace(SMALL, host_tier_gib=0.05)
    a = closed_loop(small_trace, cfg, 4)
    b = closed_loop(small_trace, cfg, 4)
    assert a[0] == b[0]
    assert a[2] == b[2]  # makespan, bit for bit
    key = lambda r: (r["task"], r["call"])  # noqa: E731
    assert sorted(a[1], key=key) == sorted(b[1], key=key)


def test_counters_add_up_and_host_tier_turns_misses_into_restores(small_trace):
    none, _, _ = closed_loop(small_trace, SMALL, 4)
    tier, rows, _ = closed_loop(small_trace, dataclasses.replace(SMALL, host_tier_gib=1), 4)
    for c in (none, tier):
        assert c["prompt_tokens"] == small_trace.prompt_tokens
        assert c["output_tokens"] == small_trace.output_tokens
        assert (
            c["device_hit_tokens"] + c["host_restore_tokens"] + c["computed_prefill_tokens"]
            == c["prompt_tokens"]
        )
    assert none["host_restore_tokens"] == 0 and none["host_write_tokens"] == 0
    assert tier["host_restore_tokens"] > 0
    assert tier["computed_prefill_tokens"] < none["computed_prefill_tokens"]
    assert sum(r["by_source"]["host"] for r in rows) == tier["host_restore_tokens"]
    assert all(r["completion"] > 0 for r in rows)


def test_conditioned_equals_all_when_the_tier_exceeds_the_working_set(small_trace):
    big = dataclasses.replace(SMALL, host_tier_gib=1)  # > every chunk the trace has
    c_all, _, m_all = closed_loop(small_trace, big, 4)
    c_cond, _, m_cond = closed_loop(
        small_trace, dataclasses.replace(big, admission="conditioned", kappa=0), 4
    )
    assert c_all == c_cond and m_all == m_cond
    assert c_all["host_evicted_tokens"] == 0


def test_fixed_admission_declines_calls_with_more_than_kappa_new_chunks(small_trace):
    cfg = dataclasses.replace(SMALL, host_tier_gib=1, admission="fixed", kappa=0)
    c, _, _ = closed_loop(small_trace, cfg, 4)
    assert c["host_write_tokens"] == 0 and c["declined_writes"] > 0
    assert c["host_restore_tokens"] == 0


def test_rate_admission_writes_less_than_all(small_trace):
    base = dataclasses.replace(SMALL, host_tier_gib=1)
    c_all, _, _ = closed_loop(small_trace, base, 4)
    rate = dataclasses.replace(base, admission="rate", rate_limit_gib_s=2e-5)  # ~21 KB/s
    c_rate, _, _ = closed_loop(small_trace, rate, 4)
    assert 0 < c_rate["host_write_tokens"] < c_all["host_write_tokens"]
    assert c_rate["declined_writes"] > 0


def test_write_back_writes_only_what_the_device_evicts(small_trace):
    roomy = dataclasses.replace(SMALL, device_kv_gib=1, host_tier_gib=1, write_policy="write-back")
    c, _, _ = closed_loop(small_trace, roomy, 4)
    assert c["device_evicted_blocks"] == 0 and c["host_write_tokens"] == 0
    tight = dataclasses.replace(roomy, device_kv_gib=SMALL.device_kv_gib)
    c, _, _ = closed_loop(small_trace, tight, 4)
    assert c["device_evicted_blocks"] > 0 and c["host_write_tokens"] > 0
    assert c["host_write_tokens"] <= c["device_evicted_blocks"] * 16


def test_write_back_restores_past_a_head_the_device_still_holds():
    """A head every task shares stays on the device, so write-back never writes it; the host
    tier's chunks after it must still be found (the tiers together hold the prefix), else a
    write-back tier restored nothing and computed as much as no tier at all."""
    # the preset's 2,000-token head: whole 256-token chunks every prompt starts with
    trace = synth("swe-agent", tasks=8, seed=1, max_calls_per_task=12, max_prompt_tokens=20000)
    back = SimConfig(device_kv_gib=0.5, host_tier_gib=2, write_policy="write-back")
    c, _, _ = closed_loop(trace, back, 4)
    none, _, _ = closed_loop(trace, dataclasses.replace(back, host_tier_gib=0), 4)
    assert c["host_write_tokens"] > 0 and c["host_restore_tokens"] > 0
    assert c["computed_prefill_tokens"] < none["computed_prefill_tokens"]


def test_selective_writes_only_chunks_seen_twice(small_trace):
    base = dataclasses.replace(SMALL, host_tier_gib=1)
    c_wt, _, _ = closed_loop(small_trace, base, 4)
    c_sel, _, _ = closed_loop(small_trace, dataclasses.replace(base, write_policy="selective"), 4)
    assert 0 < c_sel["host_write_tokens"] < c_wt["host_write_tokens"]


def test_tight_device_preempts_and_still_finishes_every_call():
    cfg = SimConfig(device_kv_gib=0.03, max_num_batched_tokens=512)  # ~1300 tokens of KV

    async def main():
        sim = SimTransport(cfg, debug=True)
        reqs = [CompletionRequest(f"t{i}", 0, tokens(10 + i, 200), 300) for i in range(4)]
        rs = await asyncio.gather(*(sim.complete(r) for r in reqs))
        await sim.close()
        return rs, sim.counters()

    rs, c = run_virtual(main)
    assert c["preemptions"] > 0
    assert [r.completion_tokens for r in rs] == [300] * 4
    assert all(r.t_end >= r.t_first_token for r in rs)


def test_ttl_pins_keep_a_returning_task_on_the_device():
    # the device holds 2048 tokens; B arrives between A's two calls
    cfg = SimConfig(hardware="h100", model="llama-3-8b", tp=1, device_kv_gib=0.25)
    pa, pb = tokens(20, 1500), tokens(21, 1500)

    def scenario(c: SimConfig) -> int:
        async def main():
            sim = SimTransport(c, debug=True)
            out = tokens(22, 4)
            await sim.complete(CompletionRequest("A", 0, pa, 4, forced_output=out))
            b = asyncio.ensure_future(sim.complete(CompletionRequest("B", 0, pb, 4)))
            await asyncio.sleep(0.001)
            pa1 = np.concatenate([pa, out, tokens(23, 10)])
            r = await sim.complete(CompletionRequest("A", 1, pa1, 4))
            await b
            await sim.close()
            return r.cached_by_source["device"]

        return run_virtual(main)

    # 128 blocks; A leaves 93 full blocks cached. Without pins B takes 94 blocks: 35 empty plus
    # 59 of A's, tail first, so A's first 34 blocks survive. With a TTL pin B waits for A's
    # return, and A hits all 93 blocks.
    assert scenario(cfg) == 34 * 16
    assert scenario(dataclasses.replace(cfg, admission="ttl", ttl_s=60)) == 93 * 16


def test_request_larger_than_the_device_is_rejected():
    with pytest.raises(RequestFailed) as e:
        one(SimConfig(device_kv_gib=0.01), tokens(0, 1000), 10)
    assert e.value.kind == "http_4xx" and "--device-kv-gib" in str(e.value)


def test_an_arrival_cuts_a_decode_stretch_at_the_end_of_the_current_step():
    cfg = ROOFLINE

    async def main():
        sim = SimTransport(cfg, debug=True)
        a = asyncio.ensure_future(sim.complete(CompletionRequest("a", 0, tokens(5, 64), 2000)))
        await asyncio.sleep(1.0)  # "a" is deep inside one long decode stretch
        t = sim.engine_time()
        b = await sim.complete(CompletionRequest("b", 0, tokens(6, 64), 1))
        ra = await a
        await sim.close()
        return t, b, ra

    t, b, ra = run_virtual(main)
    step_s = (2 * 8.0e9 + 2100 * 131_072) / HARDWARE["h100"].hbm_bytes_per_s  # one decode step
    assert b.t_first_token - t < 2.5 * step_s  # not the ~8 s left of a's stretch
    assert ra.t_end > t + 5


def test_simulator_core_is_pure():
    import subprocess
    import sys

    code = (
        "import sys; import replay.sim.engine, replay.sim.device, replay.sim.host, "
        "replay.sim.cost, replay.sim.admission, replay.model.presets; "
        "bad = [m for m in ('httpx', 'aiohttp', 'matplotlib', 'asyncio') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize(
    "cfg, gaps",
    [
        (dataclasses.replace(SMALL, host_tier_gib=0.05), True),
        (SimConfig(device_kv_gib=0.06, max_num_batched_tokens=256), False),
        (
            dataclasses.replace(
                SMALL, admission="ttl", ttl_s=5, write_policy="write-back", host_tier_gib=0.02
            ),
            True,
        ),
    ],
    ids=["host-tier", "back-to-back-preempting", "ttl-write-back"],
)
def test_planning_stretches_gives_the_step_by_step_result(small_trace, cfg, gaps):
    trace = small_trace
    if not gaps:  # calls back to back: more concurrency, decode growth preempts
        trace = Trace(trace.header, [dataclasses.replace(c, gap_s=0.0) for c in trace.calls])
    fast = closed_loop(trace, cfg, 4)
    slow = closed_loop(trace, cfg, 4, stretch=False)
    assert fast[0] == slow[0]
    assert gaps or fast[0]["preemptions"] > 0
    assert fast[2] == pytest.approx(slow[2], rel=1e-9)
    key = lambda r: (r["task"], r["call"])  # noqa: E731
    for a, b in zip(sorted(fast[1], key=key), sorted(slow[1], key=key), strict=True):
        assert a["by_source"] == b["by_source"]
        assert a["t_end"] == pytest.approx(b["t_end"], rel=1e-9)


def test_jitter_is_seeded_noise_on_service_time(small_trace):
    base = dataclasses.replace(SMALL, host_tier_gib=1)
    c0, _, m0 = closed_loop(small_trace, base, 4)
    c0b, _, m0b = closed_loop(small_trace, dataclasses.replace(base, seed=5), 4)
    assert (c0, m0) == (c0b, m0b)  # without jitter the seed changes nothing
    noisy = dataclasses.replace(base, jitter=0.2, seed=1)
    c1, _, m1 = closed_loop(small_trace, noisy, 4)
    c1b, _, m1b = closed_loop(small_trace, noisy, 4)
    _, _, m2 = closed_loop(small_trace, dataclasses.replace(noisy, seed=2), 4)
    assert (c1, m1) == (c1b, m1b)  # same seed, same history
    assert m1 != m0 and m2 != m1
    assert abs(m1 / m0 - 1) < 0.2 and abs(m2 / m0 - 1) < 0.2  # noise bounded by the jitter
    assert c1["prompt_tokens"] == c0["prompt_tokens"]


# -- host-link costs: link efficiency, per-chunk overhead, blocking transfers ------------------

_LINK = SimConfig(
    hardware="h100",
    model="llama-3-8b",
    tp=1,
    device_kv_gib=0.5,  # 4,096 tokens
    host_tier_gib=1.0,
    chunk_tokens=64,
    efficiency=1.0,
)


def _restore_scenario(cfg: SimConfig, with_decoder: bool = False):
    """Y0 leaves its prompt on the host tier, E evicts most of it from the device, then Y1 (Y0's
    prompt grown) restores it; optionally X decodes 300 tokens while Y1 restores.
    Returns (Y1's result, Y1's send time, X's result or None)."""
    py = tokens(30, 2000)

    async def main():
        sim = SimTransport(cfg, debug=True)
        out = tokens(31, 1)
        await sim.complete(CompletionRequest("Y", 0, py, 1, forced_output=out))
        await sim.complete(CompletionRequest("E", 0, tokens(32, 3500), 1))
        await asyncio.sleep(1.0)  # E's writes have left the link
        x = None
        if with_decoder:
            x = asyncio.ensure_future(sim.complete(CompletionRequest("X", 0, tokens(33, 64), 300)))
            await asyncio.sleep(0.05)  # X is decoding
        t_send = sim.engine_time()
        y1 = await sim.complete(
            CompletionRequest("Y", 1, np.concatenate([py, out, tokens(34, 40)]), 1)
        )
        rx = await x if x is not None else None
        await sim.close()
        return y1, t_send, rx

    return run_virtual(main)


@pytest.mark.parametrize("blocking", [False, True])
def test_restore_costs_its_bytes_at_link_efficiency_plus_a_fixed_cost_per_chunk(blocking):
    base = dataclasses.replace(_LINK, blocking_transfers=blocking)
    slow = dataclasses.replace(base, host_link_efficiency=0.5, transfer_overhead_s=1e-3)
    (a, ta, _), (b, tb, _) = _restore_scenario(base), _restore_scenario(slow)
    d, r = a.cached_by_source["device"], a.cached_by_source["host"]
    assert r > 0 and (d, r) == (b.cached_by_source["device"], b.cached_by_source["host"])
    chunks = (d + r - 1) // 64 - d // 64 + 1
    # half the bandwidth doubles the byte time: the extra is one more byte time, plus overheads
    extra_s = r * 131_072 / HARDWARE["h100"].host_link_bytes_per_s + chunks * 1e-3
    assert (b.t_first_token - tb) - (a.t_first_token - ta) == pytest.approx(extra_s, rel=1e-6)


def test_blocking_transfers_stall_every_running_request_overlapped_ones_do_not():
    slow = dataclasses.replace(_LINK, transfer_overhead_s=0.02)  # ~0.6 s of copies for Y1
    over = _restore_scenario(slow, with_decoder=True)
    block = _restore_scenario(dataclasses.replace(slow, blocking_transfers=True), True)
    y1, _, x_over = over
    _, _, x_block = block
    chunks = -(-y1.cached_by_source["host"] // 64)
    stall_s = chunks * 0.02
    assert stall_s > 0.3
    # overlapped: X decodes through Y1's load; blocking: X's steps wait for the copies (Y1's
    # restore and the writes of its new chunks)
    assert x_block.t_end - x_over.t_end > stall_s
    assert x_over.t_end < x_block.t_end


def test_compiled_decode_stretch_is_numpys_running_sum_bit_for_bit():
    """`CostModel.decode_cum_s` (compiled) must give the bits `np.cumsum(decode_steps_s)` gives,
    or every later simulated time would move."""
    import random

    from replay.model.presets import HARDWARE, MODELS
    from replay.sim.cost import CostModel

    rng = random.Random(11)
    for model, hw in (("qwen3-coder-30b-a3b", "h20"), ("llama-3-70b", "h100")):
        cost = CostModel(MODELS[model], HARDWARE[hw], tp=rng.choice([1, 2, 8]), efficiency=0.7)
        cost.overhead_s = rng.choice([0.0, 0.003])
        for _ in range(50):
            n, ctx, steps = rng.randint(1, 64), rng.randint(0, 2_000_000), rng.randint(1, 4096)
            want = np.cumsum(cost.decode_steps_s(n, ctx, steps))
            got = cost.decode_cum_s(n, ctx, steps)
            assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


def test_rate_admission_with_an_infinite_rate_writes_what_all_writes(small_trace):
    base = dataclasses.replace(SMALL, host_tier_gib=1)
    c_all, _, _ = closed_loop(small_trace, base, 4)
    unlimited = dataclasses.replace(base, admission="rate", rate_limit_gib_s=math.inf)
    c_inf, _, _ = closed_loop(small_trace, unlimited, 4)  # inf + 0 * inf was nan: every call failed
    assert c_inf["host_write_tokens"] == c_all["host_write_tokens"] > 0
    assert c_inf["declined_writes"] == 0


def test_ttl_pins_that_never_expire_do_not_stall_a_call_that_cannot_fit(tmp_path):
    """Four tasks of 3,500-token prompts on a device that fits two, pool 2, --ttl-s inf: the first
    two tasks' pins never expire, so the next tasks waited forever (makespan inf, status ok). With
    nothing running they are unpinned, as decode pressure unpins them."""
    rows = [{"format": "replay-trace", "version": 1, "vocab_size": 32000}]
    for t in range(4):
        rows.append({"task": f"t{t}", "call": 0, "gap_s": 0, "keep": 0,
                     "append": tokens(t, 3500).tolist(), "output_len": 10})  # fmt: skip
        rows.append({"task": f"t{t}", "call": 1, "gap_s": 1, "keep": 3510,
                     "append": tokens(100 + t, 50).tolist(), "output_len": 10})  # fmt: skip
    path = tmp_path / "ttl.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    trace = read_trace(path)
    cfg = SimConfig(device_kv_gib=0.183, admission="ttl", ttl_s=math.inf)
    assert cfg.device_blocks * cfg.block_tokens < 3 * 3560  # two tasks fit, not three
    c, calls, makespan = closed_loop(trace, cfg, 2)
    assert len(calls) == 8 and math.isfinite(makespan)
    assert all(math.isfinite(r["t_first"]) for r in calls)
