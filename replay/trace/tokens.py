"""Deterministic token ids for block-hash traces and for outputs recorded only by length.

Token j of block b in namespace ns is splitmix64(seed(ns) ^ splitmix64(b) + j) mod vocab: equal
block ids in one namespace give equal tokens (prefix sharing survives), and tokens of distinct
namespaces or blocks differ except with probability about vocab**-block_size. No global state.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

__all__ = [
    "namespace_seed",
    "block_tokens",
    "output_tokens",
    "output_tokens_many",
    "tail_tokens",
    "splitmix64",
]

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """Vectorized splitmix64 finalizer over uint64 arrays.

    Array arithmetic on uint64 wraps without warnings (only numpy scalars warn), so no errstate
    context is needed: it cost more than the arithmetic for the short arrays of output ids.
    """
    z = np.array(x, dtype=np.uint64)  # a copy (an array even for one value): the rest is in place
    z += _GOLDEN
    z ^= z >> _S30
    z *= _M1
    z ^= z >> _S27
    z *= _M2
    z ^= z >> _S31
    return z


def namespace_seed(ns: str) -> np.uint64:
    """Stable 64-bit seed of a namespace name (independent of PYTHONHASHSEED)."""
    return np.uint64(int.from_bytes(hashlib.blake2b(ns.encode(), digest_size=8).digest(), "little"))


def block_tokens(ns: str, block_ids: np.ndarray, block_size: int, vocab_size: int) -> np.ndarray:
    """Token ids (int32) of consecutive blocks: len(block_ids) * block_size tokens."""
    ids = np.asarray(block_ids, dtype=np.int64).astype(np.uint64)
    base = splitmix64(ids) ^ namespace_seed(ns)
    grid = base[:, None] + np.arange(block_size, dtype=np.uint64)[None, :]
    return (splitmix64(grid.ravel()) % np.uint64(vocab_size)).astype(np.int32)


def output_tokens(task: str, index: int, n: int, vocab_size: int) -> np.ndarray:
    """Stand-in output ids for a call whose trace records only the output length."""
    base = namespace_seed(f"out\x00{task}\x00{index}")
    grid = np.arange(n, dtype=np.uint64) + base
    return (splitmix64(grid) % np.uint64(vocab_size)).astype(np.int32)


def output_tokens_many(calls: Sequence[tuple[str, int, int]], vocab_size: int) -> list[np.ndarray]:
    """`output_tokens(task, index, n, vocab_size)` of each (task, index, n), in one splitmix64
    pass: per call the work is a handful of array operations on a few hundred ids, so their fixed
    cost, not the ids, decided the time (~10 us a call); views of one array."""
    lens = np.fromiter((n for _, _, n in calls), np.int64, len(calls))
    base = np.fromiter(
        (namespace_seed(f"out\x00{task}\x00{index}") for task, index, _ in calls),
        np.uint64,
        len(calls),
    )
    starts = np.zeros(len(calls) + 1, np.int64)
    np.cumsum(lens, out=starts[1:])
    step = np.arange(starts[-1], dtype=np.int64) - np.repeat(starts[:-1], lens)
    grid = np.repeat(base, lens) + step.astype(np.uint64)  # wraps as arange + base does
    ids = (splitmix64(grid) % np.uint64(vocab_size)).astype(np.int32)
    return [ids[starts[i] : starts[i + 1]] for i in range(len(calls))]


def tail_tokens(ns: str, task: str, index: int, n: int, vocab_size: int) -> np.ndarray:
    """Ids of a blocks-trace prompt's unhashed tail (shorter than a block), unique to its call.

    WEKA traces hash only full 64-token blocks; the remaining tokens of a prompt are known only
    by count, so they are made distinct from every other call's.
    """
    base = namespace_seed(f"tail\x00{ns}\x00{task}\x00{index}")
    grid = np.arange(n, dtype=np.uint64) + base
    return (splitmix64(grid) % np.uint64(vocab_size)).astype(np.int32)
