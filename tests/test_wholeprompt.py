"""The whole-prompt model of llama.cpp's RAM tier: exact small scenarios worked out by hand from the
server's rules, and properties against a brute-force oracle of the same rules.

The real-server agreement (per-call cached tokens equal to the model's) is in
tests/real/test_llamacpp_server.py; these tests pin the rules themselves.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from replay.errors import ConfigError
from replay.model.wholeprompt import (
    MIB,
    WholePromptCache,
    WholePromptConfig,
    simulate_order,
    simulate_timed,
)
from replay.model.wholeprompt_loop import predict_cache_ram, saturation_mib, simulate_closed_loop
from replay.trace.model import Call, Trace, TraceHeader
from tests.model_traces import common_prefix

BPT = 1024  # bytes per token in the hand-worked scenarios: 1 MiB holds 1024 tokens


def ids(start: int, n: int) -> np.ndarray:
    return np.arange(start, start + n, dtype=np.int64)


def cfg(slots: int = 2, mib: int = 0, **kw) -> WholePromptConfig:
    return WholePromptConfig(slots=slots, cache_ram_mib=mib, bytes_per_token=BPT, **kw)


def serve(cache: WholePromptCache, prompt: np.ndarray, out: int, t: float):
    a = cache.admit(prompt)
    cache.release(a.slot, prompt, out, t)
    return a


def test_config_is_validated():
    with pytest.raises(ConfigError, match="slots"):
        WholePromptConfig(slots=0, cache_ram_mib=0, bytes_per_token=1)
    with pytest.raises(ConfigError, match="cache_ram_mib"):
        WholePromptConfig(slots=1, cache_ram_mib=-2, bytes_per_token=1)
    with pytest.raises(ConfigError, match="bytes_per_token"):
        WholePromptConfig(slots=1, cache_ram_mib=1, bytes_per_token=0)


def test_issue_scenario_prompt_a_then_six_others_then_a():
    """The hand check: 2 slots, A, six other 1000-token prompts, A again: nothing is
    reused with the tier off or at 5 MiB (2 MiB entries, oldest first out), 999 tokens at 256 MiB."""
    a = ids(0, 1000)
    others = [ids(10_000 * (k + 1), 1000) for k in range(6)]
    for mib, expected in ((0, 0), (5, 0), (256, 999)):
        cache = WholePromptCache(
            WholePromptConfig(
                slots=2, cache_ram_mib=mib, bytes_per_token=2060, entry_overhead_bytes=64
            )
        )
        serve(cache, a, 4, 0)
        for t, p in enumerate(others, start=1):
            serve(cache, p, 4, t)
        got = serve(cache, a, 4, 7)
        assert got.cached_tokens == expected
        assert got.source == (None if expected == 0 else "ram")


def test_slot_reuse_without_tier_and_one_token_always_computed():
    cache = WholePromptCache(cfg(slots=1, mib=0))
    p = ids(0, 100)
    assert serve(cache, p, 5, 0).cached_tokens == 0
    again = serve(cache, p, 5, 1)
    assert (again.cached_tokens, again.source) == (99, "slot")  # the server computes >= 1 token
    longer = np.concatenate([p, ids(500, 50)])
    assert serve(cache, longer, 5, 2).cached_tokens == 100  # generated tokens never match


def test_lru_slot_choice_and_similarity_choice():
    cache = WholePromptCache(cfg(slots=2, mib=0))
    a, b = ids(0, 100), ids(1000, 100)
    assert serve(cache, a, 3, 0).slot == 1  # all slots unused: the last one wins the LRU tie
    assert serve(cache, b, 3, 1).slot == 0
    # a's continuation finds a's slot by similarity although it is not the least recently used
    follow = np.concatenate([a, ids(5000, 20)])
    got = serve(cache, follow, 3, 2)
    assert (got.slot, got.cached_tokens, got.source) == (1, 100, "slot")


def test_entries_move_on_hit_and_idle_slots_are_copied():
    cache = WholePromptCache(cfg(slots=1, mib=16))
    a, b = ids(0, 200), ids(1000, 300)
    serve(cache, a, 4, 0)
    assert len(cache.entries) == 0
    serve(cache, b, 4, 1)  # LRU takes a's slot: a is saved first (203 tokens: prompt + 3 generated)
    assert [len(e) for e in cache.entries] == [203]
    got = serve(cache, np.concatenate([a, ids(9000, 10)]), 4, 2)
    assert (got.cached_tokens, got.source) == (200, "ram")
    assert [len(e) for e in cache.entries] == [303]  # a's entry left RAM, b's sequence went in
    assert cache.totals.host_restore_tokens == 200
    assert cache.totals.host_write_tokens == 203 + 303


def test_idle_slot_copy_with_two_slots():
    cache = WholePromptCache(cfg(slots=2, mib=16))
    serve(cache, ids(0, 100), 2, 0)
    serve(cache, ids(1000, 100), 2, 1)  # starts on the other slot; the idle one is copied to RAM
    assert [len(e) for e in cache.entries] == [101]
    serve(cache, ids(2000, 100), 2, 2)  # LRU slot's sequence is already in RAM: not saved twice
    assert sorted(len(e) for e in cache.entries) == [101, 101]


def test_oldest_entry_evicted_first_and_oversize_not_saved():
    cache = WholePromptCache(cfg(slots=1, mib=1))  # 1024 tokens of room
    for k in range(4):
        serve(cache, ids(10_000 * k, 400), 1, k)  # each save: 400 tokens (no generated kept)
    # saved: p0, p1, p2 in turn; at most two 400-token entries fit in 1024 tokens: p0 went first
    assert [int(e.prompt[0]) for e in cache.entries] == [10_000, 20_000]
    assert cache.totals.host_evicted_tokens == 400
    big = WholePromptCache(cfg(slots=1, mib=1))
    serve(big, ids(0, 2000), 1, 0)
    serve(big, ids(5000, 10), 1, 1)
    assert len(big.entries) == 0  # 2000 tokens > 1 MiB: skipped, nothing evicted for it


def test_unlimited_tier_is_capped_at_context_tokens():
    cache = WholePromptCache(cfg(slots=1, mib=-1, ctx_tokens=1000))
    for k in range(4):
        serve(cache, ids(10_000 * k, 400), 1, k)
    assert sum(len(e) for e in cache.entries) <= 1000


def test_admit_needs_an_idle_slot():
    cache = WholePromptCache(cfg(slots=1))
    cache.admit(ids(0, 10))
    assert not cache.can_admit()
    with pytest.raises(ConfigError, match="no idle slot"):
        cache.admit(ids(100, 10))


def chain_trace(agents: int, calls: int, first: int, append: int, out: int, gap_s: float = 1.0):
    """Agents whose every call keeps the whole previous context and appends `append` tokens."""
    cs = []
    for a in range(agents):
        ctx = 0
        for k in range(calls):
            base = 1_000_000 * (a + 1) + 10_000 * k
            app = ids(base, first if k == 0 else append).astype(np.int32)
            keep = 0 if k == 0 else ctx
            plen = keep + len(app)
            cs.append(Call(f"a{a}", k, gap_s, keep, app, plen, out))
            ctx = plen + out
    return Trace(TraceHeader(tokens="ids", vocab_size=10_000_000), cs)


def test_round_robin_cliff_and_saturation():
    """Six agents round robin on two slots: nothing is reused without the tier; with room for the
    five other agents' entries every call reuses its task's whole previous prompt."""
    t = chain_trace(agents=6, calls=3, first=500, append=100, out=10)
    order = [(f"a{a}", k) for k in range(3) for a in range(6)]
    off = simulate_order(t, order, cfg(mib=0)).totals
    assert off.cached_tokens == 0
    full = simulate_order(t, order, cfg(mib=64)).totals
    prev_prompts = sum(c.prompt_len for c in t.calls if c.index < 2)
    assert full.cached_tokens == prev_prompts
    assert full.computed_prefill_tokens == sum(cs[-1].prompt_len for cs in t.tasks.values())
    mib, floor, off_prefill = saturation_mib(t, pool=6, slots=2, bytes_per_token=BPT, order=order)
    assert floor == full.computed_prefill_tokens and off_prefill == off.computed_prefill_tokens
    below = simulate_order(t, order, cfg(mib=mib - 1)).totals.computed_prefill_tokens
    assert below > floor
    # five other agents' entries of 600-710 tokens each must fit: between 3 and 4 MiB at 1 KiB/token
    assert 3 <= mib <= 4


def test_closed_loop_with_one_agent_slot_is_the_trace_order():
    t = chain_trace(agents=4, calls=3, first=300, append=50, out=5, gap_s=0.5)
    loop = simulate_closed_loop(t, 1, cfg(mib=1))
    seq = simulate_order(t, [c.ref for c in t.calls], cfg(mib=1))
    assert [c.ref for c in loop.calls] == [c.ref for c in t.calls]
    assert loop.calls == seq.calls and loop.totals == seq.totals


def test_predict_rows_account_for_every_prompt_token():
    t = chain_trace(agents=4, calls=3, first=300, append=50, out=5, gap_s=10.0)
    rows = predict_cache_ram(t, pool=4, slots=2, cache_ram_mib=[0, 8], bytes_per_token=BPT)
    assert [r["cache_ram_mib"] for r in rows] == [0, 8]
    assert rows[0]["computed_prefill_tokens"] >= rows[1]["computed_prefill_tokens"]
    for r in rows:
        assert r["cached_tokens"] + r["computed_prefill_tokens"] == r["prompt_tokens"]
        assert r["device_hit_tokens"] + r["host_restore_tokens"] == r["cached_tokens"]


def test_timed_simulation_queues_when_slots_are_busy():
    t = chain_trace(agents=3, calls=1, first=100, append=0, out=5)
    events = [(("a0", 0), 0.0, 5.0), (("a1", 0), 0.1, 5.1), (("a2", 0), 0.2, 6.0)]
    res = simulate_timed(t, events, cfg(slots=2, mib=0))
    assert [c.ref for c in res.calls] == [("a0", 0), ("a1", 0), ("a2", 0)]
    assert res.calls[2].slot == res.calls[0].slot  # a2 waited for a0's slot


def test_a_waiting_call_chooses_among_every_slot_one_step_freed():
    """a0 and a1 end in the same step while a2 waits: the server releases both slots before it
    serves the deferred a2, which then takes a1's slot by its shared prefix (60 tokens reused),
    not the first slot freed (a0's, nothing reused)."""
    a0, a1 = ids(0, 100).astype(np.int32), ids(5_000, 100).astype(np.int32)
    a2 = np.concatenate([a1[:60], ids(9_000, 40).astype(np.int32)])
    calls = [Call(f"a{k}", 0, 0.0, 0, p, len(p), 5) for k, p in enumerate((a0, a1, a2))]
    t = Trace(TraceHeader(tokens="ids", vocab_size=10_000_000), calls)
    events = [(("a0", 0), 0.0, 1.0), (("a1", 0), 0.0, 1.0), (("a2", 0), 0.0, 2.0)]
    res = simulate_timed(t, events, cfg(slots=2, mib=0))
    by_ref = {c.ref: c for c in res.calls}
    assert by_ref[("a2", 0)].slot == by_ref[("a1", 0)].slot
    assert by_ref[("a2", 0)].cached_tokens == 60


def test_slots_freed_at_one_time_count_as_freed_in_index_order():
    """Slots the same step frees are stamped one after another in index order, so LRU takes the
    lowest of them; slots never used tie, and the server's `<=` takes the last."""
    cache = WholePromptCache(cfg(slots=3, mib=0))
    slots = [cache.admit(ids(1_000 * (k + 1), 50)).slot for k in range(3)]
    assert slots == [2, 1, 0]
    for k, slot in enumerate(slots):
        cache.release(slot, ids(1_000 * (k + 1), 50), 3, 1.0)
    assert cache.admit(ids(50_000, 50)).slot == 0


def brute_force(prompts: list[np.ndarray], outs: list[int], slots: int, limit_tokens: int):
    """The same server rules written as plainly as possible, on token lists (generated tokens are
    unique negative ids), with one byte per token and no overhead: the oracle."""
    gen = iter(range(-1, -(10**9), -1))
    slot_seq: list[list[int] | None] = [None] * slots
    last = [-1.0] * slots
    ram: list[list[int]] = []

    def save(seq):
        if not seq or any(common_prefix(e, seq) == len(seq) for e in ram):
            return
        if len(seq) > limit_tokens:
            return
        ram[:] = [e for e in ram if common_prefix(e, seq) != len(e)]
        while ram and sum(map(len, ram)) + len(seq) > limit_tokens:
            ram.pop(0)
        ram.append(seq)

    got = []
    for t, (p, o) in enumerate(zip(prompts, outs, strict=True)):
        p = list(p)
        best, chosen = 0.0, None
        for s in range(slots):
            if slot_seq[s]:
                sim = common_prefix(slot_seq[s], p) / len(p)
                if sim > best and sim > 0.1:
                    best, chosen = sim, s
        update = (
            chosen is not None and common_prefix(slot_seq[chosen], p) / len(slot_seq[chosen]) < 0.5
        )
        if chosen is None:
            chosen, t_last = None, -1.0
            for s in range(slots):
                if chosen is None or last[s] <= t_last:
                    chosen, t_last = s, last[s]
            update = True
        if update:
            save(slot_seq[chosen])
            own = slot_seq[chosen] or []
            n = common_prefix(own, p)
            keep_b, sim_b = (n / len(own) if own else -1.0), n / len(p)
            pick = None
            for e in ram:
                m = common_prefix(e, p)
                if m / len(e) < 0.25:
                    continue
                if keep_b < m / len(e) and sim_b < m / len(p):
                    keep_b, sim_b, pick = m / len(e), m / len(p), e
            if pick is not None:
                ram.remove(pick)
                slot_seq[chosen] = pick
        own = slot_seq[chosen] or []
        n = common_prefix(own, p)
        got.append(n - 1 if n == len(p) else n)
        slot_seq[chosen] = None
        for s in range(slots):
            if s != chosen:
                save(slot_seq[s])
        slot_seq[chosen] = p + [next(gen) for _ in range(max(o - 1, 0))]
        last[chosen] = float(t)
    return got


prompt_lists = st.lists(
    st.tuples(
        st.integers(0, 3),  # family: prompts of one family share prefixes
        st.integers(1, 30),  # length
        st.integers(1, 4),  # output tokens
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(prompt_lists, st.integers(1, 3), st.integers(1, 120))
@example(  # found by `make test`: the cache exactly full (82 of 82 tokens), then an entry reused
    spec=[(1, 1, 2), (0, 1, 3), (0, 1, 3), (0, 3, 4), (1, 30, 4), (0, 3, 4), (2, 26, 4), (0, 1, 1),
          (1, 2, 1)],
    slots=2,
    limit_tokens=82,
)  # fmt: skip
def test_cache_matches_brute_force_rules(spec, slots, limit_tokens):
    prompts = []
    for fam, n, _ in spec:
        base = np.arange(100 * fam, 100 * fam + 30, dtype=np.int64)
        prompts.append(base[:n])
    outs = [o for _, _, o in spec]
    # whole bytes per token, so that "n tokens fit" is exact integer arithmetic on both sides
    bytes_per_token = MIB // limit_tokens
    expected = brute_force(prompts, outs, slots, MIB // bytes_per_token)
    cache = WholePromptCache(
        WholePromptConfig(slots=slots, cache_ram_mib=1, bytes_per_token=bytes_per_token)
    )
    got = []
    for t, (p, o) in enumerate(zip(prompts, outs, strict=True)):
        got.append(serve(cache, p, o, float(t)).cached_tokens)
    assert got == expected


def test_closed_loop_is_deterministic():
    t = chain_trace(agents=5, calls=3, first=200, append=30, out=4, gap_s=0.05)
    a = simulate_closed_loop(t, 5, cfg(mib=2)).calls
    b = simulate_closed_loop(t, 5, cfg(mib=2)).calls
    assert a == b and len(a) == len(t)
