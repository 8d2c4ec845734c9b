"""LRU stack distances of a reference stream grouped into calls, in O(N log N) with a Fenwick tree.

A call looks up all its keys at once and only then updates recency (an engine matches a whole
prompt before it stores anything), so a key's distance is its depth in the LRU stack just before
its call: the number of distinct keys referenced more recently than its own last reference. A key
is in an LRU cache of K entries at its call iff its distance is below K, for every K at once
(LRU inclusion), so one pass serves every tier size. First references get `COLD` (never cached).

`stack_distances` is the numba kernel used by the model; `stack_distances_plain` is the same
algorithm in plain Python, kept as the benchmark baseline and as a second oracle in tests.
"""

from __future__ import annotations

import numba
import numpy as np

from replay.signals import interrupts_deferred

__all__ = [
    "COLD",
    "stack_distances",
    "stack_distances_plain",
    "per_reference_offsets",
]

COLD = np.iinfo(np.int64).max  # distance of a first reference: a miss at every capacity


def per_reference_offsets(n: int) -> np.ndarray:
    """Call offsets that make every reference its own call (the classic per-reference stream)."""
    return np.arange(n + 1, dtype=np.int64)


def _check(keys: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    keys = np.ascontiguousarray(keys, dtype=np.int64)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    if offsets.ndim != 1 or len(offsets) == 0 or offsets[0] != 0 or offsets[-1] != len(keys):
        raise ValueError("offsets must start at 0 and end at len(keys)")
    if np.any(np.diff(offsets) < 0):
        raise ValueError("offsets must be non-decreasing")
    if len(keys) and keys.min() < 0:
        raise ValueError("keys must be non-negative integer ids")
    n_keys = int(keys.max()) + 1 if len(keys) else 0
    return keys, offsets, n_keys


def stack_distances(
    keys: np.ndarray,
    offsets: np.ndarray | None = None,
    *,
    reverse_updates: bool = False,
) -> np.ndarray:
    """Distance of every reference (int64, `COLD` for first references).

    `keys`: dense non-negative int ids, calls concatenated. `offsets`: call boundaries (len calls+1);
    default one call per reference. The order in which a call then stores its keys:
    - default: first to last (a host tier written in prompt order);
    - `reverse_updates`: last to first, so the call's first key ends up most recent (vLLM frees a
      finished request's blocks tail first, keeping its head longest).
    Engines whose stores depend on what a lookup found are modelled per capacity in `lru_events`.
    """
    if offsets is None:
        offsets = per_reference_offsets(len(keys))
    keys, offsets, n_keys = _check(keys, offsets)
    # Ctrl-C waits for the kernel's end: raised while numba hands its arrays back, it left
    # "SystemError: ... returned a result with an exception set", or a segfault (numba #2324)
    with interrupts_deferred():
        return _kernel(keys, offsets, n_keys, reverse_updates)


@numba.njit(cache=True, nogil=True)
def _add(tree, i, v):  # pragma: no cover - compiled
    n = tree.shape[0] - 1
    while i <= n:
        tree[i] += v
        i += i & -i


@numba.njit(cache=True, nogil=True)
def _prefix(tree, owner, p, prev_p, prev_s):  # pragma: no cover - compiled
    """Marks at positions <= p. Between updates, prefix sums chain: a call's keys were mostly used
    together last time, so walking the few positions after the previous query beats the tree."""
    if prev_p >= 0 and prev_p < p <= prev_p + 32:
        s = prev_s
        for q in range(prev_p + 1, p + 1):
            if owner[q] >= 0:
                s += 1
        return s
    s = 0
    i = p
    while i > 0:
        s += tree[i]
        i -= i & -i
    return s


@numba.njit(cache=True, nogil=True)
def _store(tree, last, owner, keys, t, pos, live):  # pragma: no cover - compiled
    k = keys[t]
    p = last[k]
    if p < 0:
        live += 1
    else:
        _add(tree, p, -1)
        owner[p] = -1
    _add(tree, pos, 1)
    last[k] = pos
    owner[pos] = k
    return live


@numba.njit(cache=True, nogil=True)
def _compact(tree, last, owner, top):  # pragma: no cover - compiled
    """Renumber the live marks 1..live in recency order and rebuild the tree; returns live."""
    j = 0
    for p in range(1, top):
        k = owner[p]
        if k >= 0:
            owner[p] = -1
            j += 1
            owner[j] = k
            last[k] = j
    tree[:] = 0
    tree[1 : j + 1] = 1
    n = tree.shape[0] - 1
    for i in range(1, n + 1):  # linear-time Fenwick build
        parent = i + (i & -i)
        if parent <= n:
            tree[parent] += tree[i]
    return j


@numba.njit(cache=True, nogil=True)
def _kernel(keys, offsets, n_keys, reverse_updates):  # pragma: no cover - compiled
    # Fenwick tree over update positions, one mark at each key's latest use. Positions are
    # renumbered compactly whenever they run out, so the tree stays about twice the number of
    # distinct keys (cache-resident) instead of the stream length.
    n = keys.shape[0]
    longest = 0
    for c in range(offsets.shape[0] - 1):
        longest = max(longest, offsets[c + 1] - offsets[c])
    size = min(n, 2 * n_keys + 2 * longest) + 1
    tree = np.zeros(size + 1, np.int32)
    owner = np.full(size + 1, -1, np.int64)  # key whose latest use sits at a position
    last = np.full(n_keys, -1, np.int64)  # position of each key's latest use
    out = np.empty(n, np.int64)
    cold = np.iinfo(np.int64).max
    live = 0  # distinct keys seen so far = total marks
    pos = 1  # next free position
    for c in range(offsets.shape[0] - 1):
        a = offsets[c]
        b = offsets[c + 1]
        if pos + (b - a) > size:
            pos = _compact(tree, last, owner, pos) + 1
        prev_p = -1  # no update happens while a call looks up, so prefix sums can be chained
        prev_s = 0
        for t in range(a, b):
            p = last[keys[t]]
            if p < 0:
                out[t] = cold
                continue
            s = _prefix(tree, owner, p, prev_p, prev_s)
            out[t] = live - s
            prev_p = p
            prev_s = s
        if reverse_updates:
            for t in range(b - 1, a - 1, -1):
                live = _store(tree, last, owner, keys, t, pos, live)
                pos += 1
        else:
            for t in range(a, b):
                live = _store(tree, last, owner, keys, t, pos, live)
                pos += 1
    return out


def stack_distances_plain(
    keys, offsets=None, *, reverse_updates: bool = False
) -> list[int]:  # the benchmark's baseline: the same Fenwick pass, written the plain way
    """Plain-Python twin of `stack_distances` (lists, no numpy in the loop)."""
    keys = [int(k) for k in keys]
    n = len(keys)
    offsets = list(range(n + 1)) if offsets is None else [int(o) for o in offsets]
    tree = [0] * (n + 1)
    last: dict[int, int] = {}
    out = [0] * n
    cold = int(COLD)
    live = 0
    for c in range(len(offsets) - 1):
        a, b = offsets[c], offsets[c + 1]
        for t in range(a, b):
            p = last.get(keys[t], 0)
            if p == 0:
                out[t] = cold
                continue
            s = 0
            while p > 0:
                s += tree[p]
                p -= p & -p
            out[t] = live - s
        for j in range(b - a):
            t = b - 1 - j if reverse_updates else a + j
            k = keys[t]
            p = last.get(k, 0)
            if p == 0:
                live += 1
            else:
                while p <= n:
                    tree[p] -= 1
                    p += p & -p
            pos = a + j + 1
            last[k] = pos
            while pos <= n:
                tree[pos] += 1
                pos += pos & -pos
    return out
