"""Device KV tier: a paged block pool with prefix-chained block keys, refcounts and LRU eviction.

Pure and deterministic. Keys are dense ints (`replay.trace.keys.ChunkKeyer` at block granularity),
so per-key state lives in numpy arrays and every operation on a prefix of blocks is one vector op.

A block slot is either held by a running request (keyed: refcount > 0; or anonymous: allocated but
not yet full/computed), cached and free (keyed, refcount 0, evictable), or empty. Freed blocks join
an eviction queue as one run per release, tail block first (vLLM frees a finished request's blocks
in reverse, so its tail is evicted before its head). A hit on a free block takes it out of the queue
lazily: queue entries carry a priority that must still match the key's current one.

Eviction granularity: `block` evicts single blocks in queue order; `session` evicts whole runs (a
finished request's blocks leave together, least recently freed first), the explainer's model.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from replay.sim import device_kernel as kern

__all__ = ["DeviceTier"]


class DeviceTier:
    """Block pool of `capacity_blocks` blocks. All key arguments are int64 arrays of dense ids."""

    def __init__(self, capacity_blocks: int, eviction: str = "block", grow: bool = True):
        if capacity_blocks <= 0:
            raise ValueError("capacity_blocks must be positive")
        if eviction not in ("block", "session"):
            raise ValueError(f"unknown eviction {eviction!r}")
        self.capacity = int(capacity_blocks)
        self.eviction = eviction
        # grow=False: the owner calls `reserve` for every key before using it, and the per-call
        # methods skip their own size check (a reduction over the keys each time)
        self.grow = grow
        n = 1024
        self._resident = np.zeros(n, dtype=bool)
        self._refcnt = np.zeros(n, dtype=np.int32)
        self._prio = np.full(n, -1, dtype=np.int64)  # queue priority of a free block, else -1
        # the eviction queue: one buffer of keys in push order; the entry at buffer index i has
        # priority base + i and is valid while its key's priority still equals that
        self._buf = np.empty(1 << 14, dtype=np.int64)
        self._base = 0
        self._head = 0
        self._n = 0
        self._run_ends: deque[int] = deque()  # end priority of each release (session mode)
        self.n_cached = 0  # keyed blocks (held or free)
        self.n_free = 0  # keyed blocks with refcount 0 (evictable)
        self.n_anon = 0  # anonymous held blocks
        self.evicted_blocks = 0

    # -- sizing ---------------------------------------------------------------------------------

    def reserve(self, n_keys: int) -> None:
        """Make room for keys below `n_keys`."""
        self._ensure(n_keys - 1)

    def _ensure(self, max_key: int) -> None:
        n = len(self._resident)
        if max_key < n:
            return
        m = max(2 * n, max_key + 1)
        self._resident = np.concatenate([self._resident, np.zeros(m - n, dtype=bool)])
        self._refcnt = np.concatenate([self._refcnt, np.zeros(m - n, dtype=np.int32)])
        self._prio = np.concatenate([self._prio, np.full(m - n, -1, dtype=np.int64)])

    @property
    def n_empty(self) -> int:
        return self.capacity - self.n_cached - self.n_anon

    @property
    def n_available(self) -> int:
        """Blocks an allocation could get: empty plus evictable (read ~50,000 times a run)."""
        return self.capacity - self.n_cached - self.n_anon + self.n_free

    # -- queries --------------------------------------------------------------------------------

    def match(self, keys: np.ndarray) -> int:
        """Number of leading keys that are resident (the cached prefix, in blocks)."""
        if len(keys) == 0:
            return 0
        if self.grow:
            self._ensure(int(keys.max()))
        return int(kern.match(self._resident, keys))

    def free_among(self, keys: np.ndarray) -> int:
        """How many of these resident keys are free (would stop being evictable if acquired)."""
        if len(keys) == 0:
            return 0
        return int(kern.free_among(self._refcnt, keys))

    def is_resident(self, key: int) -> bool:
        return key < len(self._resident) and bool(self._resident[key])

    def refcount(self, key: int) -> int:
        return int(self._refcnt[key]) if key < len(self._refcnt) else 0

    # -- holding --------------------------------------------------------------------------------

    def acquire(self, keys: np.ndarray) -> None:
        """Take a reference on resident keys (a prefix hit); free ones leave the eviction queue."""
        if len(keys) == 0:
            return
        self.n_free -= int(kern.acquire(self._refcnt, self._prio, keys))

    def allocate(self, n: int) -> np.ndarray | None:
        """Hold `n` anonymous blocks, evicting free blocks as needed. Returns the evicted keys, or
        None (and changes nothing) when fewer than `n` blocks are available."""
        if n <= 0:
            return np.empty(0, dtype=np.int64)
        if n > self.n_available:
            return None
        short = n - self.n_empty
        evicted = self._evict(short) if short > 0 else np.empty(0, dtype=np.int64)
        self.n_anon += n
        return evicted

    def free_anon(self, n: int) -> None:
        """Give back `n` anonymous blocks (partial tails, unused reservations)."""
        if n < 0 or n > self.n_anon:
            raise AssertionError(f"free_anon({n}) with {self.n_anon} anonymous blocks held")
        self.n_anon -= n

    def register(self, keys: np.ndarray) -> None:
        """Turn one held anonymous block per key into that keyed block (its content is now
        computed). A key another request already cached is shared instead, and the duplicate
        anonymous block is given back."""
        if len(keys) == 0:
            return
        if len(keys) > self.n_anon:
            raise AssertionError("register without enough anonymous blocks held")
        if self.grow:
            self._ensure(int(keys.max()))
        new, was_free = kern.register(self._resident, self._refcnt, self._prio, keys)
        self.n_cached += int(new)
        self.n_free -= int(was_free)
        self.n_anon -= len(keys)

    def release(self, keys: np.ndarray) -> None:
        """Drop one reference per key (keys in sequence order); keys reaching zero join the
        eviction queue as one run, tail first."""
        if len(keys) == 0:
            return
        self._room(len(keys))
        start = self._n
        m = int(kern.release(self._refcnt, self._prio, self._buf, start, self._base, keys))
        if m < 0:
            raise AssertionError("refcount would go negative")
        if m:
            self._n += m
            self.n_free += m
            if self.eviction == "session":
                self._run_ends.append(self._base + self._n)

    def _room(self, m: int) -> None:
        """Room for `m` more queue entries: drop the consumed head, doubling the buffer as needed
        (entries keep their order, so eviction does not depend on when this happens)."""
        if self._n + m <= len(self._buf):
            return
        live = self._buf[self._head : self._n]
        size = len(self._buf)
        while size < 2 * (len(live) + m):
            size *= 2
        buf = np.empty(size, dtype=np.int64)
        buf[: len(live)] = live
        self._base += self._head
        self._n -= self._head
        self._head = 0
        self._buf = buf

    # -- eviction -------------------------------------------------------------------------------

    def _evict(self, need: int) -> np.ndarray:
        if self.eviction == "block":
            head, ev = kern.evict_block(
                self._resident, self._prio, self._buf, self._head, self._n, self._base, need
            )
            if head < 0:
                raise AssertionError("eviction queue empty while free blocks are counted")
            self._head = int(head)
        else:
            ev = self._evict_sessions(need)
        self.n_cached -= len(ev)
        self.n_free -= len(ev)
        self.evicted_blocks += len(ev)
        return ev

    def _evict_sessions(self, need: int) -> np.ndarray:
        """Whole releases, least recently freed first, until `need` blocks are evicted."""
        out: list[np.ndarray] = []
        got = 0
        prio, buf = self._prio, self._buf
        while got < need:
            head = self._head
            if head >= self._n:
                raise AssertionError("eviction queue empty while free blocks are counted")
            while self._run_ends and self._run_ends[0] - self._base <= head:
                self._run_ends.popleft()
            end = self._run_ends.popleft() - self._base
            seg = buf[head:end]
            valid = prio[seg] == self._base + head + np.arange(len(seg), dtype=np.int64)
            victims = seg[np.flatnonzero(valid)]
            self._head = end
            if len(victims):
                self._resident[victims] = False
                prio[victims] = -1
                out.append(victims)
                got += len(victims)
        return np.concatenate(out) if len(out) != 1 else out[0]

    def clear(self) -> None:
        """Drop every free cached block (the engine's reset_prefix_cache); held blocks stay."""
        if self.n_free:
            self._evict(self.n_free)
        self._base += self._n
        self._head = self._n = 0
        self._run_ends.clear()

    # -- invariants -----------------------------------------------------------------------------

    def check(self) -> None:
        """Recount everything from the arrays and raise AssertionError on any mismatch."""
        res = self._resident
        rc = self._refcnt
        assert (rc >= 0).all(), "negative refcount"
        assert not (rc[~res] != 0).any(), "refcount on a non-resident key"
        assert int(res.sum()) == self.n_cached, "cached count"
        free = res & (rc == 0)
        assert int(free.sum()) == self.n_free, "free count"
        assert self.n_anon >= 0, "negative anonymous count"
        assert self.n_cached + self.n_anon <= self.capacity, "capacity exceeded"
        queued = np.zeros(len(res), dtype=bool)
        seg = self._buf[self._head : self._n]
        ok = self._prio[seg] == self._base + self._head + np.arange(len(seg), dtype=np.int64)
        queued[seg[ok]] = True
        assert (queued == free).all(), "eviction queue out of sync with free blocks"
