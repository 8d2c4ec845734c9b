"""Stack distances against a brute-force LRU cache simulated at every capacity (the oracle)."""

from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.model.stackdist import COLD, stack_distances, stack_distances_plain


def brute_lru_hits(calls: list[list[int]], capacity: int, reverse: bool) -> list[bool]:
    """Pure LRU cache of `capacity` keys: a call looks up all its keys, then stores them in order."""
    cache: OrderedDict[int, None] = OrderedDict()
    hits = []
    for call in calls:
        hits.extend(k in cache for k in call)
        for k in reversed(call) if reverse else call:
            cache[k] = None
            cache.move_to_end(k)
            while len(cache) > capacity:
                cache.popitem(last=False)
    return hits


def flatten(calls):
    keys = np.array([k for c in calls for k in c], dtype=np.int64)
    offsets = np.cumsum([0] + [len(c) for c in calls]).astype(np.int64)
    return keys, offsets


calls_strategy = st.lists(st.lists(st.integers(0, 12), max_size=6), min_size=1, max_size=25)


@settings(max_examples=150, deadline=None)
@given(calls_strategy, st.booleans())
def test_distances_match_brute_force_lru_at_every_capacity(calls, reverse):
    keys, offsets = flatten(calls)
    d = stack_distances(keys, offsets, reverse_updates=reverse)
    for capacity in range(0, 16):
        assert (d < capacity).tolist() == brute_lru_hits(calls, capacity, reverse)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 20), max_size=60))
def test_per_reference_stream_matches_brute_force(stream):
    d = stack_distances(np.array(stream, dtype=np.int64))
    for capacity in range(0, 23):
        assert (d < capacity).tolist() == brute_lru_hits([[k] for k in stream], capacity, False)


@settings(max_examples=60, deadline=None)
@given(calls_strategy, st.booleans())
def test_plain_python_twin_agrees(calls, reverse):
    keys, offsets = flatten(calls)
    fast = stack_distances(keys, offsets, reverse_updates=reverse)
    assert fast.tolist() == stack_distances_plain(keys, offsets, reverse_updates=reverse)


def test_textbook_example():
    # a b c a: a's depth before its second use is 2 (b and c are more recent)
    d = stack_distances(np.array([0, 1, 2, 0, 0], dtype=np.int64))
    assert d.tolist() == [COLD, COLD, COLD, 2, 0]


def test_call_batching_changes_depth_of_own_keys():
    # The second call looks up [0, 1] before storing either: 0 sits under 1 (depth 1) and 1 on
    # top (depth 0); stored in reverse, 1 sits under 0.
    keys, offsets = flatten([[0, 1], [0, 1]])
    assert stack_distances(keys, offsets).tolist()[2:] == [1, 0]
    assert stack_distances(keys, offsets, reverse_updates=True).tolist()[2:] == [0, 1]


@pytest.mark.parametrize("bad", [np.array([0, 2]), np.array([1, 2, 3]), np.array([0, 2, 1, 3])])
def test_rejects_offsets_that_do_not_cover_keys(bad):
    with pytest.raises(ValueError):
        stack_distances(np.array([1, 2, 3], dtype=np.int64), bad)


def test_empty_stream():
    assert stack_distances(np.empty(0, np.int64)).tolist() == []


def test_long_stream_over_few_keys_renumbers_positions_correctly():
    # many more references than keys forces the kernel to renumber its positions repeatedly
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 9, 4000).astype(np.int64)
    cuts = np.sort(rng.choice(np.arange(1, 4000), 900, replace=False))
    offsets = np.concatenate([[0], cuts, [4000]]).astype(np.int64)
    for reverse in (False, True):
        fast = stack_distances(keys, offsets, reverse_updates=reverse)
        assert fast.tolist() == stack_distances_plain(keys, offsets, reverse_updates=reverse)
