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

__all__ = ["DeviceTier"]

_FEW = 4  # evictions up to this many blocks take the scalar path


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
        """Blocks an allocation could get: empty plus evictable."""
        return self.n_empty + self.n_free

    # -- queries --------------------------------------------------------------------------------

    def match(self, keys: np.ndarray) -> int:
        """Number of leading keys that are resident (the cached prefix, in blocks)."""
        if len(keys) == 0:
            return 0
        if self.grow:
            self._ensure(int(keys.max()))
        r = self._resident[keys]
        i = int(r.argmin())  # the first non-resident key, or 0 when all are resident
        return i if not r[i] else len(keys)

    def free_among(self, keys: np.ndarray) -> int:
        """How many of these resident keys are free (would stop being evictable if acquired)."""
        if len(keys) == 0:
            return 0
        return int(np.count_nonzero(self._refcnt[keys] == 0))

    def is_resident(self, key: int) -> bool:
        return key < len(self._resident) and bool(self._resident[key])

    def refcount(self, key: int) -> int:
        return int(self._refcnt[key]) if key < len(self._refcnt) else 0

    # -- holding --------------------------------------------------------------------------------

    def acquire(self, keys: np.ndarray) -> None:
        """Take a reference on resident keys (a prefix hit); free ones leave the eviction queue."""
        if len(keys) == 0:
            return
        rc = self._refcnt[keys]
        was_free = rc == 0
        n = int(np.count_nonzero(was_free))
        if n:
            self.n_free -= n
            # a task's next call usually takes back its whole context, all of it free
            self._prio[keys if n == len(keys) else keys[was_free]] = -1
        rc += 1
        self._refcnt[keys] = rc

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
        res = self._resident[keys]
        new = keys
        if res.any():  # rare: another request computed some of these blocks meanwhile
            new = keys[~res]
            self.acquire(keys[res])
        self._resident[new] = True
        self._refcnt[new] = 1
        self.n_cached += len(new)
        self.n_anon -= len(keys)

    def release(self, keys: np.ndarray) -> None:
        """Drop one reference per key (keys in sequence order); keys reaching zero join the
        eviction queue as one run, tail first."""
        if len(keys) == 0:
            return
        rc = self._refcnt[keys]
        rc -= 1
        if rc.min() < 0:
            raise AssertionError("refcount would go negative")
        self._refcnt[keys] = rc
        # usually the last holder lets go of all of them: no mask to gather through
        freed = keys[::-1] if not rc.any() else keys[rc == 0][::-1]
        if len(freed):
            self._push(freed)
            self.n_free += len(freed)

    def _push(self, freed: np.ndarray) -> None:
        m = len(freed)
        if self._n + m > len(self._buf):
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
        start = self._n
        self._buf[start : start + m] = freed
        self._prio[freed] = self._base + start + np.arange(m, dtype=np.int64)
        self._n += m
        if self.eviction == "session":
            self._run_ends.append(self._base + self._n)

    # -- eviction -------------------------------------------------------------------------------

    def _evict(self, need: int) -> np.ndarray:
        if self.eviction == "block" and need <= _FEW:
            few = self._evict_few(need)
            if few is not None:
                return few
        out: list[np.ndarray] = []
        got = 0
        prio, buf = self._prio, self._buf
        window = need + 64
        while got < need:
            head = self._head
            if head >= self._n:
                raise AssertionError("eviction queue empty while free blocks are counted")
            if self.eviction == "block":
                end = min(self._n, head + window)
            else:  # a whole release at a time
                while self._run_ends and self._run_ends[0] - self._base <= head:
                    self._run_ends.popleft()
                end = self._run_ends.popleft() - self._base
            seg = buf[head:end]
            valid = prio[seg] == self._base + head + np.arange(len(seg), dtype=np.int64)
            pos = np.flatnonzero(valid)
            if self.eviction == "block" and len(pos) > need - got:
                take = pos[: need - got]
                self._head = head + int(take[-1]) + 1
            else:
                take = pos
                self._head = end
                window *= 2  # sparse stretch of stale entries: look further at once
            if len(take):
                victims = seg[take]
                self._resident[victims] = False
                prio[victims] = -1
                out.append(victims)
                got += len(victims)
        ev = np.concatenate(out) if len(out) != 1 else out[0]
        self.n_cached -= len(ev)
        self.n_free -= len(ev)
        self.evicted_blocks += len(ev)
        return ev

    def _evict_few(self, need: int) -> np.ndarray | None:
        """`_evict` for a few blocks (a decode crossing a block boundary, the common case),
        scanning the queue head one entry at a time instead of with vector ops; None (nothing
        changed) when stale entries make the scan long, for the vector path to do instead."""
        buf, prio = self._buf, self._prio
        head, n, base = self._head, self._n, self._base
        victims: list[int] = []
        stop = min(n, head + 4 * _FEW)
        i = head
        while i < stop:
            k = int(buf[i])
            if prio[k] == base + i:
                victims.append(k)
                if len(victims) == need:
                    break
            i += 1
        else:
            return None
        ev = np.array(victims, dtype=np.int64)
        self._head = i + 1
        self._resident[ev] = False
        prio[ev] = -1
        self.n_cached -= need
        self.n_free -= need
        self.evicted_blocks += need
        return ev

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
