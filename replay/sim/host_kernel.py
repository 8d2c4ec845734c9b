"""Compiled per-call operations of `replay.sim.host.HostTier` on its chunk arrays.

A lookup touches the present chunks of a prompt (~125 on the paper-scale point) and finds the
leading present run; the numpy version took a gather, a mask, an unbuffered subtract and three
scatters. One loop does the same: the keys of one call are distinct, so nothing depends on the
order the scatters would apply.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["lookup", "missing"]


@numba.njit(cache=True, nogil=True)
def lookup(present, stamp, run_of, run_valid, keys, base, rid):  # pragma: no cover - compiled
    """Give the present keys, in order, stamps base, base+1, ... in queue run `rid` (their old
    runs lose one valid entry each). Returns (leading present run length, the touched keys)."""
    touched = np.empty(keys.shape[0], dtype=np.int64)
    first = -1
    n = 0
    for i in range(keys.shape[0]):
        k = keys[i]
        if not present[k]:
            if first < 0:
                first = i
            continue
        run_valid[run_of[k]] -= 1
        stamp[k] = base + n
        run_of[k] = rid
        touched[n] = k
        n += 1
    if n:
        run_valid[rid] = n
    return (keys.shape[0] if first < 0 else first), touched[:n]


@numba.njit(cache=True, nogil=True)
def missing(present, keys):  # pragma: no cover - compiled
    """The keys not present, in order."""
    out = np.empty(keys.shape[0], dtype=np.int64)
    n = 0
    for i in range(keys.shape[0]):
        if not present[keys[i]]:
            out[n] = keys[i]
            n += 1
    return out[:n]
