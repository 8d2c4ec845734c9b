"""Device block manager: exact eviction logs, invariants, and a stateful test against a brute-force
model of vLLM's free-block queue (tail-first release, LRU eviction; whole runs in session mode)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    rule,
)

from replay.sim.device import DeviceTier


def k(*xs: int) -> np.ndarray:
    return np.array(xs, dtype=np.int64)


def run_request(dev: DeviceTier, keys: np.ndarray) -> np.ndarray:
    """Admit a request the way the engine does: hit prefix, allocate the rest, register it."""
    m = dev.match(keys)
    dev.acquire(keys[:m])
    ev = dev.allocate(len(keys) - m)
    assert ev is not None
    dev.register(keys[m:])
    return ev


def test_finished_request_is_evicted_tail_first():
    dev = DeviceTier(6)
    run_request(dev, k(1, 2, 3))
    dev.release(k(1, 2, 3))
    run_request(dev, k(4, 5, 6))
    dev.release(k(4, 5, 6))
    assert dev.n_free == 6 and dev.n_empty == 0
    ev = run_request(dev, k(7, 8))
    assert ev.tolist() == [3, 2]  # A's tail goes first, its head stays
    assert dev.match(k(1, 2, 3)) == 1
    ev = run_request(dev, k(9, 10))
    assert ev.tolist() == [1, 6]  # then A's head, then B's tail
    dev.check()


def test_session_eviction_drops_whole_release_runs():
    dev = DeviceTier(6, eviction="session")
    for keys in (k(1, 2, 3), k(4, 5, 6)):
        run_request(dev, keys)
        dev.release(keys)
    ev = run_request(dev, k(7))  # needs one block, but A leaves as a whole
    assert sorted(ev.tolist()) == [1, 2, 3]
    assert dev.match(k(4, 5, 6)) == 3
    assert dev.n_empty == 2
    dev.check()


def test_hit_takes_blocks_out_of_the_queue_and_release_requeues_them_last():
    dev = DeviceTier(4)
    run_request(dev, k(1, 2))
    dev.release(k(1, 2))
    run_request(dev, k(3, 4))
    dev.release(k(3, 4))
    run_request(dev, k(1, 2))  # full hit: 1 and 2 are held again
    assert dev.refcount(1) == 1 and dev.n_free == 2
    dev.release(k(1, 2))
    ev = run_request(dev, k(5, 6, 7))
    assert ev.tolist() == [4, 3, 2]  # 3,4 were freed before 1,2's second release
    dev.check()


def test_shared_blocks_count_references_and_never_go_negative():
    dev = DeviceTier(8)
    run_request(dev, k(1, 2, 3))
    run_request(dev, k(1, 2, 9))  # shares 1, 2
    assert dev.refcount(1) == 2 and dev.refcount(9) == 1
    dev.release(k(1, 2, 3))
    assert dev.refcount(1) == 1 and dev.n_free == 1  # only 3 is free
    dev.release(k(1, 2, 9))
    with pytest.raises(AssertionError):
        dev.release(k(1))
    dev.check()


def test_allocation_beyond_available_changes_nothing():
    dev = DeviceTier(3)
    run_request(dev, k(1, 2))
    assert dev.allocate(2) is None
    assert dev.n_anon == 0 and dev.n_cached == 2
    dev.check()


def test_register_shares_a_block_another_request_cached_meanwhile():
    dev = DeviceTier(4)
    assert dev.allocate(2) is not None  # request X reserves 2 anonymous blocks
    run_request(dev, k(5, 6))  # request Y computes 5, 6 first
    dev.register(k(5, 6))  # X finishes the same content: it shares, gives its blocks back
    assert dev.refcount(5) == 2 and dev.n_anon == 0 and dev.n_cached == 2
    dev.check()


@pytest.mark.parametrize("stale", [3, 30])
def test_eviction_skips_stale_queue_entries_however_many(stale):
    """A re-acquired request leaves stale queue entries ahead of the only free block: a few are
    skipped one by one, many send the eviction to its vector scan; both find the same block."""
    dev = DeviceTier(stale + 1)
    a = np.arange(stale, dtype=np.int64)
    run_request(dev, a)
    dev.release(a)
    run_request(dev, k(50))
    dev.release(k(50))
    assert dev.match(a) == stale
    dev.acquire(a)  # a's queue entries go stale; 50 is the only free block
    assert dev.allocate(1).tolist() == [50]
    assert dev.allocate(1) is None  # nothing left to evict, nothing changed
    dev.check()


class BruteDevice:
    """Oracle: dicts and lists, one block at a time."""

    def __init__(self, capacity: int, eviction: str):
        self.capacity = capacity
        self.eviction = eviction
        self.ref: dict[int, int] = {}
        self.runs: list[list[int]] = []  # free queue, oldest run first
        self.anon = 0

    def free(self) -> list[int]:
        return [x for r in self.runs for x in r]

    def available(self) -> int:
        return self.capacity - len(self.ref) - self.anon + len(self.free())

    def match(self, keys: list[int]) -> int:
        n = 0
        for x in keys:
            if x not in self.ref:
                break
            n += 1
        return n

    def acquire(self, keys: list[int]) -> None:
        for x in keys:
            if self.ref[x] == 0:
                for r in self.runs:
                    if x in r:
                        r.remove(x)
                self.runs = [r for r in self.runs if r]
            self.ref[x] += 1

    def allocate(self, n: int) -> list[int] | None:
        if n > self.available():
            return None
        out: list[int] = []
        while self.capacity - len(self.ref) - self.anon < n:
            if self.eviction == "block":
                x = self.runs[0].pop(0)
                victims = [x]
            else:
                victims = self.runs[0][:]
                self.runs[0] = []
            self.runs = [r for r in self.runs if r]
            for x in victims:
                del self.ref[x]
            out += victims
        self.anon += n
        return out

    def register(self, keys: list[int]) -> None:
        for x in keys:
            if x in self.ref:
                self.acquire([x])
            else:
                self.ref[x] = 1
        self.anon -= len(keys)

    def release(self, keys: list[int]) -> None:
        freed = []
        for x in keys:
            self.ref[x] -= 1
            if self.ref[x] == 0:
                freed.append(x)
        if freed:
            self.runs.append(freed[::-1])


class DeviceMachine(RuleBasedStateMachine):
    requests = Bundle("requests")

    def __init__(self) -> None:
        super().__init__()
        self.dev: DeviceTier | None = None
        self.ref: BruteDevice | None = None

    @initialize(
        capacity=st.integers(1, 12),
        eviction=st.sampled_from(["block", "session"]),
        grow=st.booleans(),
    )
    def init(self, capacity, eviction, grow):
        # grow=False is how the engine builds it: keys reserved up front, no size check per call
        self.dev = DeviceTier(capacity, eviction, grow=grow)
        if not grow:
            self.dev.reserve(16)
        self.ref = BruteDevice(capacity, eviction)

    @rule(
        target=requests,
        keys=st.lists(st.integers(0, 15), min_size=1, max_size=8, unique=True),
    )
    def start(self, keys):
        if self.dev is None or self.ref is None:
            return None
        arr = np.array(keys, dtype=np.int64)
        m = self.dev.match(arr)
        assert m == self.ref.match(keys)
        hit = arr[:m]
        need = len(keys) - m
        if need > self.dev.n_available - self.dev.free_among(hit):
            return None
        self.dev.acquire(hit)
        self.ref.acquire(keys[:m])
        ev = self.dev.allocate(need)
        ev_ref = self.ref.allocate(need)
        assert ev is not None and ev_ref is not None
        if self.dev.eviction == "block":
            assert ev.tolist() == ev_ref
        else:
            assert sorted(ev.tolist()) == sorted(ev_ref)
        self.dev.register(arr[m:])
        self.ref.register(keys[m:])
        return keys

    @rule(keys=consumes(requests))
    def finish(self, keys):
        if keys is None or self.dev is None or self.ref is None:
            return
        self.dev.release(np.array(keys, dtype=np.int64))
        self.ref.release(keys)

    @invariant()
    def agree(self):
        if self.dev is None or self.ref is None:
            return
        self.dev.check()
        resident = {x for x in range(16) if self.dev.is_resident(x)}
        assert resident == set(self.ref.ref)
        for x, r in self.ref.ref.items():
            assert self.dev.refcount(x) == r
        assert self.dev.n_free == len(self.ref.free())
        assert self.dev.n_available == self.ref.available()


TestDeviceMachine = DeviceMachine.TestCase
TestDeviceMachine.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)
