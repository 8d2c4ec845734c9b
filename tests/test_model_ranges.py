"""Batch-aware service times and the pre-registered ranges of the working-set model.

The mechanism: a call decoding next to others (or with a long context) streams more bytes per step
than a lone sequence's weights, so it stays in flight longer; its task's next call then looks up
after more of the other agents' traffic has passed through the device, and the tail of the previous
context (past the host tier's whole chunks) is gone. The model's closed loop prices each call's
decode for the batch in flight when it is sent; the range runs the same loop under the bounding
service models (alone, whole pool) and seeded service noise.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from replay.driver.options import RunOptions
from replay.errors import ConfigError
from replay.model.order import EngineQueue, ServiceModel, StepRoofline, closed_loop_schedule
from replay.model.predict import predict_tiers
from replay.model.presets import HARDWARE, MODELS, get_hardware, get_model
from replay.model.ranges import RANGE_QUANTITIES
from tests.model_traces import at_the_old_pace, make_trace
from tests.sim_helpers import replay_on_sim

# bytes decide every step: 1 MB/s of HBM, 1,000 weight bytes per token, 1 KV byte per token
STEP = StepRoofline(
    flops_per_s=1e15,
    hbm_bytes_per_s=1e6,
    linear_flops_per_token=1.0,
    attention_flops_per_pair=0.0,
    kv_bytes_per_token=1.0,
    weight_bytes_active=1000.0,
    weight_bytes_total=1e9,
)


def test_step_roofline_by_hand():
    # decode, batch 1, 300 context tokens: (1,000 weights + 300 KV) bytes / 1e6 B/s
    assert STEP.decode_step_s(1, 300) == pytest.approx(1.3e-3)
    # batch 8 streams 8x the active weights (MoE: each token its own experts) and all contexts
    assert STEP.decode_step_s(8, 2400) == pytest.approx((8000 + 2400) / 1e6)
    # ... but never more than all the weights
    capped = dataclasses.replace(STEP, weight_bytes_total=5000.0)
    assert capped.decode_step_s(8, 2400) == pytest.approx((5000 + 2400) / 1e6)
    # a prefill of 300 new tokens after 50 cached ones reads 300 tokens' weights and 350 of KV
    assert STEP.prefill_s(300, 50) == pytest.approx((300_000 + 350) / 1e6)
    # compute-bound when FLOPs dominate: 2 linear + 1 per pair, 4 tokens after 6 -> 8 + 34 FLOPs
    flops = dataclasses.replace(
        STEP, flops_per_s=1.0, linear_flops_per_token=2.0, attention_flops_per_pair=1.0
    )
    assert flops.prefill_s(4, 6) == pytest.approx(2 * 4 + (4 * 6 + 4 * 5 / 2))
    with pytest.raises(ConfigError):
        dataclasses.replace(STEP, hbm_bytes_per_s=0.0)


def test_decode_is_priced_for_the_batch():
    svc = ServiceModel(step=STEP)
    alone = svc.decode_s(10, 300)
    # 10 steps, the middle one at 300 + 4.5 context tokens
    assert alone == pytest.approx(10 * (1000 + 304.5) / 1e6)
    # sent while two calls of 500 and 700 tokens decode: batch 3 over 1,500 tokens of context
    busy = svc.decode_s(10, 300, (500, 700))
    assert busy == pytest.approx(10 * (3000 + 1500 + 3 * 4.5) / 1e6)
    assert busy > 3 * alone
    # fixed batches ignore who is in flight: k sequences as long as this one
    assert svc.with_decode_batch(1).decode_s(10, 300, (500, 700)) == pytest.approx(alone)
    four = svc.with_decode_batch(4).decode_s(10, 300)
    assert four == pytest.approx(10 * (4000 + 1200 + 4 * 4.5) / 1e6)
    # without a roofline the flat rates stay what they were
    assert ServiceModel(decode_tokens_per_s=10.0).decode_s(10, 300, (500,)) == pytest.approx(1.0)
    with pytest.raises(ConfigError):
        ServiceModel(decode_batch=0)


def test_from_presets_adds_a_roofline_and_keeps_the_flat_rates():
    svc = ServiceModel.from_presets(MODELS["qwen3-coder-30b-a3b"], HARDWARE["h20"], tp=8)
    assert svc.step is not None
    # one rank's KV per token and the active weights per token, as the presets define them
    assert svc.step.kv_bytes_per_token == MODELS["qwen3-coder-30b-a3b"].bytes_per_token(8)
    # a 32K-token context reads about as many KV bytes per step as the active weights: decoding
    # it is about half as fast as the flat weights-only rate says
    flat_s = 1.0 / svc.decode_tokens_per_s
    assert 1.5 * flat_s < svc.step.decode_step_s(1, 32_768) < 3 * flat_s


def _two_tasks():
    a0 = list(range(1, 301))  # 300 tokens: one 256-token chunk and a 44-token tail
    a0_out = list(range(1001, 1021))  # 20 output tokens
    a1 = a0 + a0_out + list(range(2001, 2011))  # the next call: context + 10 new tokens
    b0 = list(range(3001, 3641))  # 640 unrelated tokens: the whole device
    return make_trace(
        {"a": [(a0, a0_out), (a1, [9] * 5)], "b": [(b0, [8] * 5)]},
        gaps={("a", 1): 0.02, ("b", 0): 0.36},
    )


def test_a_slower_decode_loses_the_device_tail_by_hand():
    """a0 prefills in 0.3003 s, then decodes 20 tokens: alone 20 x 1.31 ms (ends 0.3265 s, a1
    sent 20 ms later, before b0 at 0.36 s), in a batch of two 20 x 2.62 ms (ends 0.3527 s, so b0's
    640 tokens sweep the 640-token device before a1 looks up at 0.3727 s). The host tier holds
    a0's one whole chunk either way."""
    trace = _two_tasks()
    kw = dict(
        pool=2,
        bytes_per_token=1.0,
        chunk_tokens=256,
        device_tokens=640,
        tiers_gib=[1.0],
        block_tokens=16,
        offload_pays=False,
    )
    fast = closed_loop_schedule(trace, 2, service=ServiceModel(step=STEP, decode_batch=1))
    slow = closed_loop_schedule(trace, 2, service=ServiceModel(step=STEP, decode_batch=2))
    assert fast.refs == [("a", 0), ("a", 1), ("b", 0)]
    assert slow.refs == [("a", 0), ("b", 0), ("a", 1)]
    t_a1 = {s: s.t_lookup_s[s.refs.index(("a", 1))] for s in (fast, slow)}
    assert t_a1[fast] == pytest.approx(0.3003 + 20 * (1000 + 300 + 9.5) / 1e6 + 0.02)
    assert t_a1[slow] == pytest.approx(0.3003 + 20 * (2000 + 600 + 2 * 9.5) / 1e6 + 0.02)

    def a1_outcome(schedule):
        row = predict_tiers(trace, order=schedule, **kw)["tiers"][0]
        return row["computed_prefill_tokens"] - 300 - 640  # a0 and b0 compute everything

    # a1 is 330 tokens; a0's context left 319 tokens of KV = 19 whole blocks = 304 tokens
    assert a1_outcome(fast) == 330 - 304
    # only the host chunk is left: 330 - 256
    assert a1_outcome(slow) == 330 - 256


def test_service_jitter_is_seeded():
    trace = _two_tasks()
    svc = ServiceModel(step=STEP)
    plain = closed_loop_schedule(trace, 2, service=svc)
    same = [
        closed_loop_schedule(trace, 2, service=svc, jitter=0.05, rng=np.random.default_rng(7))
        for _ in range(2)
    ]
    other = closed_loop_schedule(trace, 2, service=svc, jitter=0.05, rng=np.random.default_rng(8))
    np.testing.assert_array_equal(same[0].t_end_s, same[1].t_end_s)
    assert not np.array_equal(same[0].t_end_s, other.t_end_s)
    # each call's service time moves by at most 5%
    d_plain = plain.t_end_s - plain.t_lookup_s
    d_jit = same[0].t_end_s - same[0].t_lookup_s
    assert np.all(np.abs(d_jit / d_plain - 1) <= 0.05 + 1e-12)
    with pytest.raises(ConfigError):
        closed_loop_schedule(trace, 2, service=svc, jitter=0.05)  # no generator
    with pytest.raises(ConfigError):
        closed_loop_schedule(trace, 2, service=svc, jitter=1.5, rng=np.random.default_rng(0))


def _queue_pair(gap_b: float = 0.0):
    a0 = list(range(1, 301))
    b0 = list(range(3001, 3201))  # 200 tokens
    return make_trace({"a": [(a0, [7] * 10)], "b": [(b0, [8] * 10)]}, gaps={("b", 0): gap_b})


def test_engine_queue_waits_for_device_space_by_hand():
    """a0 (300 + 10 tokens) is admitted at 0; b0 (200 + 10), sent at 0.1 s, does not fit beside it
    in 400 tokens of device, so it waits and looks up when a0 ends. Prices: prefill 1 ms per
    token (bytes 1,000 per token), decode 10 steps."""
    trace = _queue_pair(gap_b=0.1)
    svc = ServiceModel(step=STEP)
    s = closed_loop_schedule(trace, 2, service=svc, queue=EngineQueue(400))
    assert s.refs == [("a", 0), ("b", 0)]
    a_pre = (300_000 + 300) / 1e6  # a0's prefill
    a_end = a_pre + 10 * (1000 + 304.5) / 1e6
    np.testing.assert_allclose([s.t_lookup_s[0], s.t_prefill_s[0], s.t_end_s[0]], [0, a_pre, a_end])
    assert s.t_lookup_s[1] == pytest.approx(a_end)  # admitted (and looked up) when a0 ended
    # with room for both, b0 looks up when sent but its prefill queues behind a0's
    roomy = closed_loop_schedule(trace, 2, service=svc, queue=EngineQueue(1000))
    assert roomy.t_lookup_s[1] == pytest.approx(0.1)
    assert roomy.t_prefill_s[1] == pytest.approx(a_pre + (200_000 + 200) / 1e6)
    # without a queue it prefills at once
    free = closed_loop_schedule(trace, 2, service=svc)
    assert free.t_prefill_s[1] == pytest.approx(0.1 + (200_000 + 200) / 1e6)
    # the work the queue is given replaces the new tokens: b0 computing only 100 of its 200
    half = closed_loop_schedule(trace, 2, service=svc, queue=EngineQueue(1000, {("b", 0): 100}))
    assert half.t_prefill_s[1] == pytest.approx(a_pre + (100_000 + 200) / 1e6)
    # a call larger than the device is admitted alone rather than never
    tiny = closed_loop_schedule(trace, 2, service=svc, queue=EngineQueue(100))
    assert tiny.t_lookup_s[1] == pytest.approx(a_end)
    # no device in the model: no space limit, only the prefill line
    unlimited = closed_loop_schedule(trace, 2, service=svc, queue=EngineQueue(0))
    assert unlimited.t_lookup_s[1] == pytest.approx(0.1)
    assert unlimited.t_prefill_s[1] == pytest.approx(roomy.t_prefill_s[1])
    with pytest.raises(ConfigError):
        EngineQueue(-1)


@pytest.fixture(scope="module")
def small_paper():
    """paper-h20 at a quarter of its token lengths (as tests/test_paper_h20.py): 40 tasks, pool
    16, a 1 GiB device; the working set is about 2.9 GiB, so a 5 GiB tier is far above it."""
    from replay.trace.synth import synth

    return at_the_old_pace(synth("swe-agent", tasks=40, seed=0, scale=0.25))


H20_SERVICE = ServiceModel.from_presets(get_model("qwen3-coder-30b-a3b"), get_hardware("h20"), 8)


def _predict(trace, tiers, **kw):
    return predict_tiers(
        trace,
        pool=16,
        bytes_per_token=24_576,
        chunk_tokens=256,
        device_tokens=43_690,  # 1 GiB at 24,576 bytes per token
        tiers_gib=tiers,
        offload_pays=False,
        service=kw.pop("service", H20_SERVICE),
        **kw,
    )


@pytest.mark.parametrize("queue", [False, True])
def test_ranges_contain_the_point_and_say_how(small_paper, queue):
    with_range = _predict(small_paper, [0.0, 5.0], ranges=True, queue=queue)
    assert with_range["range"]["method"] == "service_bounds"
    assert with_range["range"]["engine_queue"] is queue is with_range["engine_queue"]
    for row in with_range["tiers"]:
        for q in RANGE_QUANTITIES:
            assert row[f"{q}_low"] <= row[q] <= row[f"{q}_high"], (row["host_tier_gib"], q)
    # the slow bound keeps calls in flight longer, so the device keeps less: a real width
    tier5 = with_range["tiers"][1]
    assert tier5["computed_prefill_tokens_high"] > tier5["computed_prefill_tokens_low"]
    # without ranges the rows keep their old shape (existing readers), and the point is the same
    plain = _predict(small_paper, [0.0, 5.0], queue=queue)
    assert "range" not in plain and "computed_prefill_tokens_low" not in plain["tiers"][1]
    assert plain["tiers"][1]["computed_prefill_tokens"] == tier5["computed_prefill_tokens"]


def test_ranges_need_the_closed_loop_and_a_roofline(small_paper):
    flat = ServiceModel(H20_SERVICE.prefill_tokens_per_s, H20_SERVICE.decode_tokens_per_s)
    no_step = _predict(small_paper, [5.0], ranges=True, service=flat)
    assert "unavailable" in no_step["range"]
    assert "computed_prefill_tokens_low" not in no_step["tiers"][0]
    in_order = _predict(small_paper, [5.0], ranges=True, order="trace")
    assert "unavailable" in in_order["range"]


def _simulate(trace, jitter: float, seed: int, out: Path) -> dict:
    from replay.sim.options import SimConfig

    cfg = SimConfig(
        hardware="h20",
        model="qwen3-coder-30b-a3b",
        tp=8,
        device_kv_gib=1.0,
        host_tier_gib=5.0,
        jitter=jitter,
        seed=seed,
    )
    summary = replay_on_sim(trace, cfg, RunOptions(pool=16), out)
    assert summary["status"] == "ok" and summary["errors"] == 0
    return summary


def test_the_queue_moves_lookups_to_admission(small_paper):
    """Without a tier the device queue binds: calls wait, so fewer of their prefixes are still on
    the device when they look up, and the model computes more (as the simulator does)."""
    free = _predict(small_paper, [0.0])["tiers"][0]
    queued = _predict(small_paper, [0.0], queue=True)["tiers"][0]
    assert queued["computed_prefill_tokens"] > free["computed_prefill_tokens"]
    assert queued["device_hit_tokens"] < free["device_hit_tokens"]


@pytest.mark.parametrize("jitter,seed", [(0.0, 0), (0.05, 1)])
def test_range_contains_the_simulator_far_from_the_transition(small_paper, jitter, seed, tmp_path):
    pred = _predict(small_paper, [5.0], ranges=True, queue=True)
    assert pred["working_set_gib"] < 5.0 / 1.5  # far above the working set
    (row,) = pred["tiers"]
    sim = _simulate(small_paper, jitter, seed, tmp_path)
    for q in ("computed_prefill_tokens", "host_restore_tokens", "host_write_tokens"):
        assert row[f"{q}_low"] <= sim[q] <= row[f"{q}_high"], (q, sim[q], row)
    # and the range is narrow: a few percent of the computed prefill, not a blanket
    width = row["computed_prefill_tokens_high"] - row["computed_prefill_tokens_low"]
    assert width <= 0.05 * row["computed_prefill_tokens"]
