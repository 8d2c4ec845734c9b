"""Compiled half of `replay.sim.keying`: one call's block keys in one pass, dense ids in a flat table.

`TaskKeyer.keys` did this as a dozen numpy operations and a Python dict of every prefix hash seen
(287K on the paper-scale point, one cache miss per insert); here it is one numba call per request:
the common prefix with the task's previous context, each new block's content hash, the prefix
chain, and the dense id of each prefix hash from an open-addressing table of (hash, id) pairs in
one array. The arithmetic is the numpy code's it replaced (uint64, wrapping; splitmix64 with
`replay.trace.tokens`' constants), so the keys are the same ids bit for bit.
"""

from __future__ import annotations

import numba
import numpy as np

from replay.trace.tokens import _GOLDEN, _M1, _M2, _S27, _S30, _S31

__all__ = ["TOKEN_MUL", "key_blocks", "mix_tokens", "rehash"]

TOKEN_MUL = np.uint64(0xD6E8FEB86659FD93)
_RUN = 64  # tokens compared per unrolled run of the prefix compare


@numba.njit(cache=True, nogil=True, inline="always")
def _splitmix(z):  # pragma: no cover - compiled
    """`replay.trace.tokens.splitmix64` of one uint64."""
    z = z + _GOLDEN
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@numba.njit(cache=True, nogil=True, inline="always")
def _mix(t, table):  # pragma: no cover - compiled
    """A token's mix: the table's entry for ids it covers, else splitmix64(int64(t) * MUL) with
    the id sign-extended (what `astype(np.uint64)` gives a negative int32)."""
    if 0 <= t < table.shape[0]:
        return table[t]
    return _splitmix(np.uint64(np.int64(t)) * TOKEN_MUL)


@numba.njit(cache=True, nogil=True)
def mix_tokens(tokens, table):  # pragma: no cover - compiled
    """The mix of each token (tests compare it with the vectorized formula)."""
    out = np.empty(tokens.shape[0], dtype=np.uint64)
    for i in range(tokens.shape[0]):
        out[i] = _mix(tokens[i], table)
    return out


@numba.njit(cache=True, nogil=True)
def _common(a, b, n):  # pragma: no cover - compiled
    """Common prefix of a[:n] and b[:n]: whole runs first (no early exit inside, so the compare
    vectorizes), then token by token inside the run that differs."""
    i = 0
    while i + _RUN <= n:
        diff = 0
        for j in range(_RUN):
            diff |= a[i + j] ^ b[i + j]
        if diff != 0:
            break
        i += _RUN
    while i < n and a[i] == b[i]:
        i += 1
    return i


@numba.njit(cache=True, nogil=True)
def _prefix_len(pprompt, pout, prompt, output, cap):  # pragma: no cover - compiled
    """Common prefix, up to `cap` tokens, of (pprompt + pout) and (prompt + output). Each side is
    two pieces: compare piece against piece, each from its own start."""
    na, nb = pprompt.shape[0], prompt.shape[0]
    cp = 0
    while cp < cap:
        if cp < na and cp < nb:
            n = min(na, nb, cap) - cp
            k = _common(pprompt[cp:], prompt[cp:], n)
        elif cp < na:
            n = min(na, nb + output.shape[0], cap) - cp
            k = _common(pprompt[cp:], output[cp - nb :], n)
        elif cp < nb:
            n = min(na + pout.shape[0], nb, cap) - cp
            k = _common(pout[cp - na :], prompt[cp:], n)
        else:
            n = min(na + pout.shape[0], nb + output.shape[0], cap) - cp
            k = _common(pout[cp - na :], output[cp - nb :], n)
        if n <= 0:
            break
        cp += k
        if k < n:
            break
    return cp


@numba.njit(cache=True, nogil=True)
def _dense_id(h, table, n_ids):  # pragma: no cover - compiled
    """(id, new): the dense id of prefix hash `h`, numbering it `n_ids` if unseen. The table
    holds (hash, id + 1) pairs side by side (0: a free slot), so a probe is one cache miss on a
    table of a million slots; linear probing from the hash's low bits (a splitmix64 output
    chained by odd multipliers: well mixed)."""
    mask = np.uint64(table.shape[0] // 2 - 1)
    i = h & mask
    while True:
        j = np.int64(2 * i)
        v = table[j + 1]
        if v == 0:
            table[j] = h
            table[j + 1] = np.uint64(n_ids + 1)
            return n_ids, True
        if table[j] == h:
            return np.int64(v) - 1, False
        i = (i + np.uint64(1)) & mask


@numba.njit(cache=True, nogil=True)
def rehash(table, new_table):  # pragma: no cover - compiled
    """Move every (hash, id + 1) pair into a larger, zeroed table."""
    mask = np.uint64(new_table.shape[0] // 2 - 1)
    for j in range(0, table.shape[0], 2):
        if table[j + 1] == 0:
            continue
        h = table[j]
        i = h & mask
        while new_table[np.int64(2 * i) + 1] != 0:
            i = (i + np.uint64(1)) & mask
        new_table[np.int64(2 * i)] = h
        new_table[np.int64(2 * i) + 1] = table[j + 1]


@numba.njit(cache=True, nogil=True)
def key_blocks(
    prompt, output, pprompt, pout, kbuf, pbuf, n_prev, b, tokmix, tokw, pw, pwinv, table, n_ids
):  # pragma: no cover - compiled
    """Keys and raw prefix hashes of the full blocks of (prompt + output), reusing the first
    blocks shared with the task's previous context (pprompt + pout, whose n_prev keys and hashes
    lead kbuf / pbuf; empty arrays and 0 for a task's first call).

    The keys of a task's calls are views of one buffer: a call whose blocks extend the previous
    call's writes its new ones past n_prev, where no earlier view reaches; one that shares fewer
    (or outgrows the buffer) starts a new buffer with the shared part copied. Returns (kbuf,
    pbuf, n blocks, n_ids after, largest id the mix table missed or -1). `pw` / `pwinv` hold
    powers of M and M^-1 past the block count."""
    n_p = prompt.shape[0]
    n = (n_p + output.shape[0]) // b
    cap = min(n_prev, n) * b
    r = _prefix_len(pprompt, pout, prompt, output, cap) // b if cap > 0 else 0
    if r < n_prev or n > kbuf.shape[0]:
        size = max(2 * n, 256)
        keys = np.empty(size, dtype=np.int64)
        pre = np.empty(size, dtype=np.uint64)
        keys[:r] = kbuf[:r]
        pre[:r] = pbuf[:r]
    else:
        keys, pre = kbuf, pbuf
    missed = -1
    acc = np.uint64(0)
    if r > 0:
        acc = pre[r - 1] * pwinv[r - 1]
    for i in range(r, n):
        s = np.uint64(0)
        base = i * b
        for j in range(b):
            k = base + j
            t = prompt[k] if k < n_p else output[k - n_p]
            if t >= tokmix.shape[0] and t > missed:
                missed = t
            s += _mix(t, tokmix) * tokw[j]
        acc += _splitmix(s) * pwinv[i]
        pre[i] = acc * pw[i]
    # the ids in a second pass: each probe is a cache miss in a table of megabytes, and with no
    # hashing between them the processor overlaps several (keying 27% less CPU, same ids)
    for i in range(r, n):
        kid, new = _dense_id(pre[i], table, n_ids)
        keys[i] = kid
        if new:
            n_ids += 1
    return keys, pre, n, n_ids, missed
