"""Compiled per-call operations of `replay.sim.device.DeviceTier` on its key arrays.

Each operation walks one request's keys (a ~2,000-block context on the paper-scale point) once,
where the numpy versions made a gather, a compare, a mask and a scatter, each a separate pass with
its own Python overhead. The keys of one call are distinct (prefix-chained ids), so a loop over
them does what the gather/scatter did. State the kernels cannot hold (counts, the queue's head
and end) stays in the Python object; the kernels return what changed.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["acquire", "evict_block", "free_among", "match", "register", "release"]


@numba.njit(cache=True, nogil=True)
def match(resident, keys):  # pragma: no cover - compiled
    """Number of leading keys that are resident."""
    for i in range(keys.shape[0]):
        if not resident[keys[i]]:
            return i
    return keys.shape[0]


@numba.njit(cache=True, nogil=True)
def free_among(refcnt, keys):  # pragma: no cover - compiled
    """How many keys have no holder."""
    n = 0
    for i in range(keys.shape[0]):
        if refcnt[keys[i]] == 0:
            n += 1
    return n


@numba.njit(cache=True, nogil=True, inline="always")
def _hold(refcnt, prio, k):  # pragma: no cover - compiled
    """One more reference on resident key `k`; 1 if it was free (it leaves the queue), else 0."""
    was_free = 0
    if refcnt[k] == 0:
        was_free = 1
        prio[k] = -1
    refcnt[k] += 1
    return was_free


@numba.njit(cache=True, nogil=True)
def acquire(refcnt, prio, keys):  # pragma: no cover - compiled
    """One more reference per key; returns how many were free (they leave the queue)."""
    was_free = 0
    for i in range(keys.shape[0]):
        was_free += _hold(refcnt, prio, keys[i])
    return was_free


@numba.njit(cache=True, nogil=True)
def register(resident, refcnt, prio, keys):  # pragma: no cover - compiled
    """Key the blocks: a new key is resident with one reference; one already resident (another
    request computed it meanwhile) is acquired instead. Returns (new keys, free ones acquired)."""
    new = 0
    was_free = 0
    for i in range(keys.shape[0]):
        k = keys[i]
        if resident[k]:
            was_free += _hold(refcnt, prio, k)
        else:
            resident[k] = True
            refcnt[k] = 1
            new += 1
    return new, was_free


@numba.njit(cache=True, nogil=True)
def release(refcnt, prio, buf, end, base, keys):  # pragma: no cover - compiled
    """Drop one reference per key; keys reaching zero are appended to the queue at `end`, tail
    first (last key first), each with its priority. Returns how many were appended, or -1 (and
    changes nothing) when a key has no reference to drop. `buf` has room for len(keys) more."""
    for i in range(keys.shape[0]):
        if refcnt[keys[i]] <= 0:
            return -1
    m = 0
    for i in range(keys.shape[0] - 1, -1, -1):
        k = keys[i]
        refcnt[k] -= 1
        if refcnt[k] == 0:
            buf[end + m] = k
            prio[k] = base + end + m
            m += 1
    return m


@numba.njit(cache=True, nogil=True)
def evict_block(resident, prio, buf, head, end, base, need):  # pragma: no cover - compiled
    """Evict the first `need` valid queue entries from `head` (an entry is valid while its key's
    priority is still its position). Returns (new head, victims in queue order); head -1 when
    the queue ran out first (the counts were wrong)."""
    out = np.empty(need, dtype=np.int64)
    got = 0
    i = head
    while got < need:
        if i >= end:
            return -1, out[:got]
        k = buf[i]
        if prio[k] == base + i:
            out[got] = k
            got += 1
            resident[k] = False
            prio[k] = -1
        i += 1
    return i, out
