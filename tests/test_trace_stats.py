"""Trace statistics against a brute-force oracle and hand-computed small cases."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.trace.model import Call, Trace, TraceHeader
from replay.trace.stats import common_prefix_len, trace_stats
from replay.trace.synth import synth


def _lcp_slow(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _reuse_oracle(trace: Trace) -> float:
    reused = 0
    for task in trace.tasks:
        prev = None
        for s in trace.steps(task):
            if prev is not None:
                reused += _lcp_slow(s.prompt.tolist(), prev)
            prev = s.prompt.tolist() + s.output.tolist()
    return reused / trace.prompt_tokens


@given(
    st.lists(st.integers(0, 3), max_size=40), st.lists(st.integers(0, 3), max_size=40), st.data()
)
def test_common_prefix_len_matches_oracle(a, b, data) -> None:
    want = _lcp_slow(a, b)
    start = data.draw(st.integers(0, want))
    assert common_prefix_len(np.array(a, np.int32), np.array(b, np.int32), start) == want


def test_hand_computed_trace() -> None:
    h = TraceHeader(vocab_size=100)
    a = [
        Call(
            "a",
            0,
            0.0,
            0,
            np.array([1, 2, 3, 4], np.int32),
            4,
            2,
            output=np.array([5, 6], np.int32),
        ),
        # keeps 3 tokens, then appends 4 again: prefix with [1,2,3,4,5,6] is 4 tokens, not 3
        Call("a", 1, 2.0, 3, np.array([4, 9], np.int32), 5, 1, output=np.array([7], np.int32)),
        # keeps everything (5 prompt + 1 output) and appends 2
        Call("a", 2, 4.0, 6, np.array([8, 8], np.int32), 8, 1, output=np.array([0], np.int32)),
    ]
    b = [Call("b", 0, 0.0, 0, np.array([1, 2], np.int32), 2, 3, parent=("a", 0))]
    s = trace_stats(Trace(h, a + b))
    assert (s.tasks, s.calls, s.subagents) == (2, 4, 1)
    assert s.prompt_tokens == 4 + 5 + 8 + 2
    assert s.output_tokens == 2 + 1 + 1 + 3
    assert s.unique_tokens == 4 + 2 + 2 + 2
    assert s.reuse_fraction == (4 + 6) / 19
    assert s.prompt_len_max == 8 and s.prompt_len_p50 == 4.5
    assert (s.gap_p50_s, s.gap_max_s) == (3.0, 4.0)
    assert set(s.to_dict()) == {
        "tasks", "calls", "prompt_tokens", "output_tokens", "unique_tokens", "prompt_len_mean",
        "prompt_len_p50", "prompt_len_p90", "prompt_len_max", "reuse_fraction",
        "prefix_cacheable_fraction", "gap_p50_s",
        "gap_p90_s", "gap_max_s", "subagents",
    }  # fmt: skip


def test_reuse_matches_oracle_on_synthetic_trace() -> None:
    t = synth("claude-code", tasks=4, seed=11, scale=0.01, shared_head_tokens=32)
    assert abs(trace_stats(t).reuse_fraction - _reuse_oracle(t)) < 1e-12


def test_reuse_matches_oracle_on_blocks_trace() -> None:
    h = TraceHeader(tokens="blocks", vocab_size=50, block_size=4)
    calls = [
        Call("a", 0, 0.0, 0, np.array([10, 11, 12], np.int64), 10, 3),  # last block partial
        Call("a", 1, 1.0, 3, np.array([13], np.int64), 14, 2),  # the partial block, now full
        Call("a", 2, 1.0, 1, np.array([99, 98], np.int64), 13, 2),  # drops blocks, adds a tail
    ]
    t = Trace(h, calls)
    s = trace_stats(t)
    assert s.reuse_fraction == _reuse_oracle(t)
    # call 1 keeps the 10 prompt tokens (its 3rd block regenerates the partial one), call 2 keeps
    # one block; a coincidental equal token right after may add one (vocab 50).
    reused = s.reuse_fraction * s.prompt_tokens
    assert 10 + 4 <= reused <= 10 + 4 + 2


def test_empty_gaps_are_none() -> None:
    t = Trace(TraceHeader(), [Call("a", 0, 0.0, 0, np.array([1], np.int32), 1, 1, at_s=3.0)])
    s = trace_stats(t)
    assert s.gap_p50_s is None and s.reuse_fraction == 0.0


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000))
def test_reuse_oracle_random_seeds(seed: int) -> None:
    t = synth("swe-agent", tasks=2, seed=seed, scale=0.005, max_calls_per_task=5)
    assert abs(trace_stats(t).reuse_fraction - _reuse_oracle(t)) < 1e-12


def test_huge_recorded_output_is_never_expanded() -> None:
    # `output_len: 10**12` died with MemoryError while its stand-in ids were built. Only as much
    # of an output as a later prompt can hold matters for reuse, so the numbers must equal those
    # of the same trace with short outputs (stand-ins of a shorter length are a prefix).
    def trace(out_len: int) -> Trace:
        return Trace(
            TraceHeader(vocab_size=1000),
            [
                Call("a", 0, 0.0, 0, np.array([1, 2, 3], np.int32), 3, out_len),
                Call("a", 1, 1.0, 8, np.array([9, 9], np.int32), 10, 2),  # keeps 5 output ids
                Call("b", 0, 0.0, 0, np.array([4, 5], np.int32), 2, out_len),  # nobody reuses
            ],
        )

    huge, small = trace_stats(trace(10**12)), trace_stats(trace(12))
    assert huge.output_tokens == 2 * 10**12 + 2
    assert huge.reuse_fraction == _reuse_oracle(trace(12)) == small.reuse_fraction
    assert huge.reuse_fraction >= 8 / 15
    assert huge.to_dict() | {"output_tokens": 0} == small.to_dict() | {"output_tokens": 0}


def _cacheable_oracle(trace: Trace, block: int) -> float:
    """Full blocks whose whole prefix (the tokens up to the block's end) some earlier call had."""
    seen: set[tuple[int, ...]] = set()
    hits = 0
    for task in trace.tasks:
        for s in trace.steps(task):
            p = s.prompt.tolist()
            for end in range(block, len(p) + 1, block):
                key = tuple(p[:end])
                hits += key in seen
                seen.add(key)
    return hits * block / trace.prompt_tokens


def test_prefix_cacheable_counts_reuse_across_tasks() -> None:
    """Two one-call tasks sharing 32 tokens: no reuse within a task, 2 of 6 blocks served."""
    h = TraceHeader(vocab_size=1000)
    head = np.arange(32, dtype=np.int32)
    calls = [
        Call(t, 0, 0.0, 0, np.concatenate([head, np.full(16, 500 + i, np.int32)]), 48, 1)
        for i, t in enumerate("ab")
    ]
    s = trace_stats(Trace(h, calls))
    assert s.reuse_fraction == 0.0 and s.prefix_cacheable_fraction == 32 / 96


def test_prefix_cacheable_matches_oracle_on_synthetic_traces() -> None:
    for seed in range(3):
        trace = synth("claude-code", tasks=3, seed=seed, scale=0.004, max_calls_per_task=4)
        got = trace_stats(trace).prefix_cacheable_fraction
        assert got == _cacheable_oracle(trace, 16)
