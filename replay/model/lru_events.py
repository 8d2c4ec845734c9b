"""LRU tiers driven by a schedule of cache events, on the stack-distance machinery of `stackdist`.

A key is in an LRU cache of K entries iff its stack depth is below K; the same Fenwick tree over
recency positions answers that in O(log N) per reference, whatever K is. Here the references come
as events (lookup, prefill done, end; see `replay.model.order`), and what an event stores can depend
on what it found, so each pass is exact for one capacity:

- host (write-through): a lookup touches the present prompt chunks and notes the missing ones; at
  the end of the prefill, those still missing are written (a chunk another call wrote meanwhile is
  not written twice). Result per call: the unbroken present run from the first chunk, and the
  chunks written.
- device (blocks, stored tail first so a request's head stays longest, as vLLM frees them): a
  lookup takes the unbroken run of resident prompt blocks (at most `matchable`) and claims space
  for the whole prompt at once (an engine allocates the prefill's blocks at admission); the
  prefill's end stores the prompt's blocks again; the call's end stores its context blocks. Blocks
  held by running requests are not pinned here: a long stretch of other traffic can evict them in
  the model where the engine would keep them.
"""

from __future__ import annotations

import numba
import numpy as np

from replay.model.order import END, LOOKUP, PREFILL_DONE, Schedule
from replay.model.stackdist import _check, _compact, _prefix, _store
from replay.signals import interrupts_deferred

__all__ = ["host_pass", "device_pass"]


def _events(schedule: Schedule, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if len(offsets) != len(schedule) + 1:
        raise ValueError("one key range per scheduled call")
    return schedule.events()


def host_pass(
    keys: np.ndarray, offsets: np.ndarray, schedule: Schedule, capacity: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per call (schedule order): chunks in the unbroken present run at lookup, chunks written."""
    keys, offsets, n_keys = _check(keys, offsets)
    calls, kinds = _events(schedule, offsets)
    with interrupts_deferred():  # a signal inside numba's return crashed the process (below)
        return _host_kernel(keys, offsets, calls, kinds, n_keys, capacity)


def device_pass(
    keys: np.ndarray,
    offsets: np.ndarray,
    schedule: Schedule,
    capacity: int,
    prompt_blocks: np.ndarray,
    matchable: np.ndarray,
) -> np.ndarray:
    """Per call (schedule order): prompt blocks found resident at lookup (unbroken from the start)."""
    keys, offsets, n_keys = _check(keys, offsets)
    calls, kinds = _events(schedule, offsets)
    prompt_blocks = np.ascontiguousarray(prompt_blocks, dtype=np.int64)
    matchable = np.minimum(np.ascontiguousarray(matchable, dtype=np.int64), prompt_blocks)
    with interrupts_deferred():
        return _device_kernel(
            keys, offsets, calls, kinds, n_keys, capacity, prompt_blocks, matchable
        )


@numba.njit(cache=True, nogil=True)
def _size(offsets, n, n_keys):  # pragma: no cover - compiled
    longest = 0
    for c in range(offsets.shape[0] - 1):
        longest = max(longest, offsets[c + 1] - offsets[c])
    return min(2 * n + 1, 2 * n_keys + 2 * longest) + 1


@numba.njit(cache=True, nogil=True)
def _host_kernel(keys, offsets, calls, kinds, n_keys, capacity):  # pragma: no cover - compiled
    n = keys.shape[0]
    size = _size(offsets, n, n_keys)
    tree = np.zeros(size + 1, np.int32)
    owner = np.full(size + 1, -1, np.int64)
    last = np.full(n_keys, -1, np.int64)
    dist = np.empty(n, np.int64)
    missing = np.zeros(n, np.bool_)
    n_calls = offsets.shape[0] - 1
    run = np.zeros(n_calls, np.int64)
    written = np.zeros(n_calls, np.int64)
    cold = np.iinfo(np.int64).max
    live = 0
    pos = 1
    for e in range(calls.shape[0]):
        c = calls[e]
        kind = kinds[e]
        a = offsets[c]
        b = offsets[c + 1]
        if b == a or kind == END:
            continue
        if pos + (b - a) > size:
            pos = _compact(tree, last, owner, pos) + 1
        prev_p = -1
        prev_s = 0
        for t in range(a, b):
            if kind == PREFILL_DONE and not missing[t]:
                continue
            p = last[keys[t]]
            if p < 0:
                dist[t] = cold
                continue
            s = _prefix(tree, owner, p, prev_p, prev_s)
            dist[t] = live - s
            prev_p = p
            prev_s = s
        if kind == LOOKUP:
            in_run = True
            for t in range(a, b):
                present = dist[t] < capacity
                missing[t] = not present
                if present:
                    if in_run:
                        run[c] += 1
                    live = _store(tree, last, owner, keys, t, pos, live)
                    pos += 1
                else:
                    in_run = False
        else:
            for t in range(a, b):
                if missing[t] and dist[t] >= capacity:
                    live = _store(tree, last, owner, keys, t, pos, live)
                    pos += 1
                    written[c] += 1
    return run, written


@numba.njit(cache=True, nogil=True)
def _device_kernel(
    keys, offsets, calls, kinds, n_keys, capacity, prompt_blocks, matchable
):  # pragma: no cover - compiled
    n = keys.shape[0]
    size = _size(offsets, n, n_keys)
    tree = np.zeros(size + 1, np.int32)
    owner = np.full(size + 1, -1, np.int64)
    last = np.full(n_keys, -1, np.int64)
    n_calls = offsets.shape[0] - 1
    hit = np.zeros(n_calls, np.int64)
    live = 0
    pos = 1
    for e in range(calls.shape[0]):
        c = calls[e]
        kind = kinds[e]
        a = offsets[c]
        # a lookup and a prefill's end cover the prompt's blocks, an end the whole context
        stop = offsets[c + 1] if kind == END else a + prompt_blocks[c]
        if stop == a:
            continue
        if pos + (stop - a) > size:
            pos = _compact(tree, last, owner, pos) + 1
        if kind == LOOKUP:
            prev_p = -1
            prev_s = 0
            t = a
            while t < a + matchable[c]:
                p = last[keys[t]]
                if p < 0:
                    break
                s = _prefix(tree, owner, p, prev_p, prev_s)
                if live - s >= capacity:
                    break
                prev_p = p
                prev_s = s
                t += 1
            hit[c] = t - a
            # the engine takes the matched blocks and allocates the rest of the prompt's now, so the
            # whole prompt claims its space at admission
            stop = a + prompt_blocks[c]
        for t in range(stop - 1, a - 1, -1):
            live = _store(tree, last, owner, keys, t, pos, live)
            pos += 1
    return hit
