"""Block/tail/output token derivation matches traces/FORMAT.md, re-implemented here in plain Python."""

from __future__ import annotations

import hashlib

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from replay.trace.tokens import block_tokens, output_tokens, output_tokens_many, tail_tokens

M64 = (1 << 64) - 1


def _mix(z: int) -> int:
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def _seed(s: str) -> int:
    return int.from_bytes(hashlib.blake2b(s.encode(), digest_size=8).digest(), "little")


def _spec_block(ns: str, b: int, block_size: int, vocab: int) -> list[int]:
    base = _mix(b & M64) ^ _seed(ns)
    return [_mix((base + j) & M64) % vocab for j in range(block_size)]


@given(
    st.text(max_size=8),
    st.lists(st.integers(-(2**63), 2**63 - 1), max_size=4),
    st.integers(1, 8),
    st.integers(2, 200_000),
)
def test_block_tokens_follow_the_spec(ns: str, blocks: list[int], bs: int, vocab: int) -> None:
    got = block_tokens(ns, np.array(blocks, np.int64), bs, vocab).tolist()
    assert got == [t for b in blocks for t in _spec_block(ns, b, bs, vocab)]


@given(st.text(max_size=6), st.integers(0, 1000), st.integers(0, 20), st.integers(2, 50_000))
def test_output_and_tail_tokens_follow_the_spec(task: str, idx: int, n: int, vocab: int) -> None:
    base = _seed(f"out\x00{task}\x00{idx}")
    want = [_mix((base + j) & M64) % vocab for j in range(n)]
    assert output_tokens(task, idx, n, vocab).tolist() == want
    base = _seed(f"tail\x00ns\x00{task}\x00{idx}")
    want = [_mix((base + j) & M64) % vocab for j in range(n)]
    assert tail_tokens("ns", task, idx, n, vocab).tolist() == want


@given(
    st.lists(st.tuples(st.text(max_size=6), st.integers(0, 1000), st.integers(0, 40)), max_size=6),
    st.integers(2, 50_000),
)
def test_output_tokens_of_many_calls_are_each_calls_own(calls, vocab: int) -> None:
    got = output_tokens_many(calls, vocab)
    assert len(got) == len(calls)
    for (task, idx, n), ids in zip(calls, got, strict=True):
        base = _seed(f"out\x00{task}\x00{idx}")
        assert ids.dtype == np.int32
        assert ids.tolist() == [_mix((base + j) & M64) % vocab for j in range(n)]


def test_namespaces_separate_equal_block_ids() -> None:
    ids = np.arange(200, dtype=np.int64)
    a = block_tokens("conv-a", ids, 64, 32000).reshape(200, 64)
    b = block_tokens("conv-b", ids, 64, 32000).reshape(200, 64)
    assert not any(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    again = block_tokens("conv-a", ids[::-1].copy(), 64, 32000).reshape(200, 64)[::-1]
    assert np.array_equal(a, again)  # a block's tokens depend on its id, not its position
