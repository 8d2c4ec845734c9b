"""Host tier: LRU over chunk keys, the restorable leading run, unread-eviction accounting, checked
against an OrderedDict oracle."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.sim.host import HostTier


def a(*xs: int) -> np.ndarray:
    return np.array(xs, dtype=np.int64)


def test_lookup_returns_leading_run_and_touches_all_present():
    h = HostTier(4)
    h.write(a(1, 2, 3, 4))
    h.write(a(0))  # evicts 1
    assert h.lookup(a(1, 2, 3)) == 0  # chunk 1 is gone: nothing restorable
    assert h.keys_lru_order() == [4, 0, 2, 3]  # 2 and 3 were still touched, in prompt order
    h.write(a(5, 6))  # evicts 4 then 0
    assert h.keys_lru_order() == [2, 3, 5, 6]
    assert h.chunks_evicted == 3 and h.chunks_evicted_unread == 3


def test_read_chunks_are_not_counted_as_unread_evictions():
    h = HostTier(2)
    h.write(a(1, 2))
    h.mark_read(a(1))
    h.write(a(3, 4))
    assert h.chunks_evicted == 2 and h.chunks_evicted_unread == 1


def test_a_write_larger_than_the_tier_keeps_its_tail():
    h = HostTier(3)
    h.write(a(1, 2, 3, 4, 5))
    assert h.keys_lru_order() == [3, 4, 5]
    assert h.chunks_written == 5 and h.chunks_evicted == 2
    h.check()


ops = st.lists(
    st.tuples(
        st.sampled_from(["lookup", "write", "read"]),
        st.lists(st.integers(0, 12), min_size=0, max_size=6, unique=True),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(capacity=st.integers(1, 8), ops=ops, grow=st.booleans())
def test_matches_an_ordered_dict_lru(capacity, ops, grow):
    h = HostTier(capacity, grow=grow)
    if not grow:  # as the engine builds it: keys reserved up front, no size check per call
        h.reserve(13)
    lru: OrderedDict[int, bool] = OrderedDict()
    evicted = unread = 0
    for op, keys in ops:
        arr = np.array(keys, dtype=np.int64)
        if op == "lookup":
            run, in_run = 0, True
            for x in keys:
                if x in lru:
                    lru.move_to_end(x)
                    run += in_run
                else:
                    in_run = False
            assert h.lookup(arr) == run
        elif op == "write":
            new = [x for x in keys if x not in lru]
            assert h.missing(arr).tolist() == new
            h.write(np.array(new, dtype=np.int64))
            for x in new:
                if len(lru) >= capacity:
                    _, was_read = lru.popitem(last=False)
                    evicted += 1
                    unread += not was_read
                lru[x] = False
        else:
            present = [x for x in keys if x in lru]
            h.mark_read(np.array(present, dtype=np.int64))
            for x in present:
                lru[x] = True
        assert h.keys_lru_order() == list(lru)
        assert (h.chunks_evicted, h.chunks_evicted_unread) == (evicted, unread)
        h.check()
