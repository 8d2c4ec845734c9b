"""Engine personalities: each one's cache counters equal the model of the engine it stands for.

- `llamacpp`: the simulator's slots and RAM tier give, call by call, what the whole-prompt model
  (`replay.model.wholeprompt.simulate_timed`, checked against the real server) gives for the
  simulated run's own send and end times.
- `vllm`: with calls one at a time, device hits equal the stack-distance model's at the
  capacity vLLM leaves after its null block (`replay.model.predict.predict_tiers`).
"""

from __future__ import annotations

import asyncio
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.clock import run_virtual
from replay.errors import ConfigError
from replay.model.predict import predict_tiers
from replay.model.wholeprompt import WholePromptConfig, simulate_timed
from replay.protocol import CompletionRequest
from replay.sim.options import SimConfig
from replay.sim.personality import STATE_META_BYTES_PER_TOKEN, STATE_OVERHEAD_BYTES
from replay.sim.transport import SimTransport
from replay.trace.synth import synth

GIB = 1 << 30


def _replay(trace, cfg: SimConfig, pool: int) -> tuple[dict, list[tuple]]:
    """A closed loop of `pool` agents (task order, gap, send); returns counters and per-call
    (ref, t_send, t_end, cached, by_source) in send order."""

    async def main():
        sim = SimTransport(cfg, vocab_size=trace.header.vocab_size, debug=True)
        await sim.start()
        todo = list(trace.task_ids)
        rows: list[tuple] = []
        sends = itertools.count()
        loop = asyncio.get_running_loop()

        async def agent() -> None:
            while todo:
                task = todo.pop(0)
                for step in trace.steps(task):
                    await asyncio.sleep(step.call.gap_s)
                    req = CompletionRequest(task, step.call.index, step.prompt, len(step.output))
                    t_send, sent = loop.time(), next(sends)
                    r = await sim.complete(req)
                    ref = (task, step.call.index)
                    rows.append((sent, ref, t_send, r.t_end, r.cached_tokens, r.cached_by_source))

        try:
            await asyncio.gather(*(agent() for _ in range(pool)))
        finally:
            await sim.close()
        # In send order: calls sent at the same instant reach the server (and the model) in it.
        return sim.counters(), [row[1:] for row in sorted(rows, key=lambda row: row[0])]

    return run_virtual(main)


def _tiny_trace(seed: int, tasks: int, shared_head_tokens: int | None = 0):
    return synth(
        "swe-agent",
        tasks=tasks,
        seed=seed,
        vocab_size=8192,
        scale=0.05,
        max_calls_per_task=5,
        shared_head_tokens=shared_head_tokens,
    )


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    tasks=st.integers(2, 6),
    pool=st.integers(1, 6),
    slots=st.integers(1, 3),
    cache_ram_mib=st.sampled_from([0, 1, 2, 4, 16, -1]),
    shared_head=st.booleans(),
    as_mib=st.booleans(),
)
def test_llamacpp_personality_equals_whole_prompt_model(
    seed, tasks, pool, slots, cache_ram_mib, shared_head, as_mib
):
    """The RAM tier given as host_tier_gib (MiB / 1024) or as cache_ram_mib (which alone can
    say -1, no limit) is the model's --cache-ram."""
    trace = _tiny_trace(seed, tasks, shared_head_tokens=None if shared_head else 0)
    _check_llamacpp_against_model(trace, pool, slots, cache_ram_mib, as_mib or cache_ram_mib < 0)


def test_llamacpp_personality_with_a_shared_head_equals_whole_prompt_model():
    """Two calls end in the same step and a third waits: with a head the tasks share, the waiting
    call's slot depends on whether it chooses among both freed slots (the server releases every
    slot of a step before it serves a deferred task) or takes the first freed one. The model once
    did the latter and credited this run's calls to RAM where the server (and the simulator) reuse
    the slot."""
    trace = _tiny_trace(0, 3, shared_head_tokens=None)  # the preset's own head
    _check_llamacpp_against_model(trace, pool=3, slots=2, cache_ram_mib=2)


def _check_llamacpp_against_model(trace, pool, slots, cache_ram_mib, as_mib=False):
    tier = {"cache_ram_mib": cache_ram_mib} if as_mib else {"host_tier_gib": cache_ram_mib / 1024}
    cfg = SimConfig(
        hardware="h20",
        model="tiny-gguf",
        tp=1,
        device_kv_gib=1.0,
        **tier,
        block_tokens=16,
        max_num_seqs=slots,
        personality="llamacpp",
    )
    counters, rows = _replay(trace, cfg, pool)
    model = simulate_timed(
        trace,
        [(ref, t_send, t_end) for ref, t_send, t_end, _, _ in rows],
        WholePromptConfig(
            slots=slots,
            cache_ram_mib=cache_ram_mib,
            bytes_per_token=float(cfg.bytes_per_token + STATE_META_BYTES_PER_TOKEN),
            entry_overhead_bytes=STATE_OVERHEAD_BYTES,
        ),
    )
    by_model = {c.ref: (c.cached_tokens, c.source) for c in model.calls}
    for ref, _, _, cached, by_source in rows:
        want, source = by_model[ref]
        assert cached == want, (ref, cached, want)
        assert by_source["host"] == (want if source == "ram" else 0), ref
    t = model.totals
    assert counters["device_hit_tokens"] == t.device_hit_tokens
    assert counters["host_restore_tokens"] == t.host_restore_tokens
    assert counters["computed_prefill_tokens"] == t.computed_prefill_tokens
    assert counters["host_write_tokens"] == t.host_write_tokens
    assert counters["host_evicted_tokens"] == t.host_evicted_tokens


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), tasks=st.integers(2, 6), blocks=st.integers(8, 120))
def test_vllm_personality_device_hits_equal_stack_distances(seed, tasks, blocks):
    trace = _tiny_trace(seed, tasks)
    block_tokens = 16
    cfg = SimConfig(
        hardware="h20",
        model="tiny-llama",
        tp=1,
        device_kv_gib=blocks * block_tokens * 1024 / GIB,
        block_tokens=block_tokens,
        chunk_tokens=block_tokens,
        personality="vllm",
    )
    assert cfg.device_blocks == blocks - 1  # the null block
    longest = max(len(s.prompt) + len(s.output) for t in trace.task_ids for s in trace.steps(t))
    if longest > cfg.device_blocks * block_tokens:
        with pytest.raises(Exception, match="exceeds what the simulated device holds"):
            _replay(trace, cfg, 1)
        return
    counters, rows = _replay(trace, cfg, 1)
    predicted = predict_tiers(
        trace,
        pool=1,
        bytes_per_token=cfg.bytes_per_token,
        chunk_tokens=block_tokens,
        device_tokens=cfg.device_blocks * block_tokens,
        tiers_gib=[0.0],
        order=[ref for ref, *_ in rows],
        block_tokens=block_tokens,
        offload_pays=False,
    )
    (row,) = predicted["tiers"]
    assert counters["device_hit_tokens"] == row["device_hit_tokens"]
    assert counters["computed_prefill_tokens"] == row["computed_prefill_tokens"]


def test_unknown_personality_is_a_one_line_error():
    with pytest.raises(Exception, match="personality.*valid: reference, vllm, llamacpp"):
        SimConfig(personality="sglang")


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"cache_ram_mib": 4}, "needs the llamacpp personality"),
        ({"personality": "llamacpp", "cache_ram_mib": 4, "host_tier_gib": 1.0}, "not both"),
        ({"personality": "llamacpp", "cache_ram_mib": -2}, "must be >= -1"),
        ({"personality": "llamacpp", "cache_ram_mib": 1.5}, "must be an integer"),
    ],
)
def test_cache_ram_mib_refusals_name_the_option(options, said):
    with pytest.raises(ConfigError, match=f"--cache-ram-mib.*{said}"):
        SimConfig(**options)
