"""Host KV tier: chunks of `chunk_tokens` in host DRAM, LRU eviction, read/write accounting.

Pure. Keys are dense ids of prefix-chained chunks (the key of a chunk's last device block), so a
chunk key stands for every token up to the chunk's end. A lookup touches every chunk of the prompt
that is present, in prompt order, and reports the unbroken run present from the prompt start (only
that run can be restored: a chunk after a gap has no usable prefix).

LRU is kept with use stamps: each touch or write gives the keys fresh increasing stamps and appends
them to a queue as one run; eviction pops from the queue head, skipping entries whose stamp is no
longer the key's (touched again since). Every operation on a call's chunks is a few vector ops.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from replay.sim import host_kernel as kern

__all__ = ["HostTier"]


class HostTier:
    """LRU set of chunk keys (int64 arrays of dense ids) with capacity `capacity_chunks` (> 0)."""

    def __init__(self, capacity_chunks: int, grow: bool = True):
        if capacity_chunks <= 0:
            raise ValueError("capacity_chunks must be positive")
        self.capacity = int(capacity_chunks)
        # grow=False: the owner calls `reserve` for every key before using it, and the per-call
        # methods skip their own size check (a reduction over the keys each time)
        self.grow = grow
        n = 1024
        self._present = np.zeros(n, dtype=bool)
        self._read = np.zeros(n, dtype=bool)  # restored at least once since written
        self._stamp = np.full(n, -1, dtype=np.int64)
        self._run_of = np.zeros(n, dtype=np.int64)  # queue run holding a key's current stamp
        self._run_valid = np.zeros(64, dtype=np.int64)
        self._runs: deque[list] = deque()  # [keys, base_stamp, cursor, run id]
        self._next_run = 0
        self._next = 0
        self.size = 0
        self.chunks_written = 0
        self.chunks_evicted = 0
        self.chunks_evicted_unread = 0
        self.chunks_read = 0
        self.last_evict_at: float | None = None

    def __len__(self) -> int:
        return self.size

    def reserve(self, n_keys: int) -> None:
        """Make room for keys below `n_keys`."""
        self._grow_to(n_keys - 1)

    def _ensure(self, keys: np.ndarray) -> None:
        if self.grow and len(keys):
            self._grow_to(int(keys.max()))

    def _grow_to(self, m: int) -> None:
        n = len(self._present)
        if m < n:
            return
        k = max(2 * n, m + 1)
        self._present = np.concatenate([self._present, np.zeros(k - n, dtype=bool)])
        self._read = np.concatenate([self._read, np.zeros(k - n, dtype=bool)])
        self._stamp = np.concatenate([self._stamp, np.full(k - n, -1, dtype=np.int64)])
        self._run_of = np.concatenate([self._run_of, np.zeros(k - n, dtype=np.int64)])

    def __contains__(self, key: int) -> bool:
        return key < len(self._present) and bool(self._present[key])

    @property
    def full(self) -> bool:
        return self.size >= self.capacity

    def _new_run(self) -> int:
        """The id the next queue run gets, with room for it in `_run_valid`."""
        rid = self._next_run
        if rid >= len(self._run_valid):
            self._run_valid = np.concatenate([self._run_valid, np.zeros_like(self._run_valid)])
        return rid

    def _queue(self, keys: np.ndarray, rid: int) -> None:
        """Queue run `rid` of `keys`, just stamped `_next`, `_next` + 1, ... (most recent last)."""
        self._runs.append([keys, self._next, 0, rid])
        self._next += len(keys)
        self._next_run += 1

    def _stamp_written(self, keys: np.ndarray) -> None:
        """Stamps for just-written keys (in no queue run yet), as one new run."""
        rid = self._new_run()
        self._stamp[keys] = self._next + np.arange(len(keys), dtype=np.int64)
        self._run_valid[rid] = len(keys)
        self._run_of[keys] = rid
        self._queue(keys, rid)

    def lookup(self, keys: np.ndarray) -> int:
        """Touch every present key, in order; return the length of the leading present run."""
        if len(keys) == 0:
            return 0
        self._ensure(keys)
        rid = self._new_run()
        first, touched = kern.lookup(
            self._present, self._stamp, self._run_of, self._run_valid, keys, self._next, rid
        )
        if len(touched):
            self._queue(touched, rid)
        return int(first)

    def present_run(self, keys: np.ndarray) -> int:
        """The length of the leading run of present keys, touching nothing."""
        if len(keys) == 0:
            return 0
        self._ensure(keys)
        absent = np.flatnonzero(~self._present[keys])
        return int(absent[0]) if len(absent) else len(keys)

    def missing(self, keys: np.ndarray) -> np.ndarray:
        if len(keys) == 0:
            return keys
        self._ensure(keys)
        return kern.missing(self._present, keys)

    def mark_read(self, keys: np.ndarray) -> None:
        """These chunks were restored into the device (a read)."""
        self._read[keys] = True
        self.chunks_read += len(keys)

    def write(self, keys: np.ndarray, now: float = 0.0) -> int:
        """Store chunks (absent, distinct) as most recent, evicting the least recent as needed.
        Returns the number evicted."""
        n = len(keys)
        if n == 0:
            return 0
        self._ensure(keys)
        if n > self.capacity:  # the head of a call's chunks would be evicted by its own tail
            keys = keys[n - self.capacity :]
            self.chunks_written += n - len(keys)
            self.chunks_evicted += n - len(keys)
            self.chunks_evicted_unread += n - len(keys)
            n = len(keys)
        over = self.size + n - self.capacity
        evicted = self._evict(over) if over > 0 else 0
        self._present[keys] = True
        self._read[keys] = False
        self._stamp_written(keys)
        self.size += n
        self.chunks_written += n
        if evicted:
            self.last_evict_at = now
        return evicted

    def _evict(self, need: int) -> int:
        got = 0
        runs = self._runs
        while got < need:
            run = runs[0]
            keys, base, cur, rid = run
            if self._run_valid[rid] == 0:
                runs.popleft()
                continue
            left = len(keys) - cur
            if self._run_valid[rid] == left:
                # no stale entry left in this run (the entries before `cur` are all gone): its
                # next keys are the victims, in order, without checking their stamps
                k = min(need - got, left)
                victims = keys[cur : cur + k]
                if k < left:
                    run[2] = cur + k
                else:
                    runs.popleft()
            else:
                end = min(len(keys), cur + max(64, 2 * (need - got)))
                rest = keys[cur:end]
                valid = self._stamp[rest] == base + cur + np.arange(len(rest), dtype=np.int64)
                pos = np.flatnonzero(valid)
                take = pos[: need - got]
                victims = rest[take]
                if len(take) < len(pos):
                    run[2] = cur + int(take[-1]) + 1
                elif end < len(keys):
                    run[2] = end
                else:
                    runs.popleft()
            if len(victims):
                self._present[victims] = False
                self._stamp[victims] = -1
                self._run_valid[rid] -= len(victims)
                self.chunks_evicted_unread += len(victims) - int(
                    np.count_nonzero(self._read[victims])
                )
                got += len(victims)
        self.size -= got
        self.chunks_evicted += got
        return got

    def clear(self) -> None:
        self._present[:] = False
        self._stamp[:] = -1
        self._runs.clear()
        self.size = 0

    def keys_lru_order(self) -> list[int]:
        """Present keys, least recently used first (for tests)."""
        present = np.flatnonzero(self._present)
        return present[np.argsort(self._stamp[present], kind="stable")].tolist()

    def check(self) -> None:
        assert self.size == int(self._present.sum()), "host size out of sync"
        assert self.size <= self.capacity, "host tier over capacity"
        assert self.chunks_evicted_unread <= self.chunks_evicted, "unread evictions > evictions"
