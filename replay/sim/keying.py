"""Block keys of each request's prompt + output, computed incrementally per task, compiled.

A block's key stands for every token up to its end (prefix-chained, as vLLM's block hashes): the
64-bit prefix hash P_i = sum_j h_j * M^(i-j) mod 2^64 over per-block content hashes h_j, a running
sum (M is odd, so M^-1 exists mod 2^64), then mapped to dense int ids in order of first
appearance. Only the blocks after the common prefix with the task's previous context are hashed.
Collisions need two different prefixes with equal 64-bit hashes: about n^2 / 2^65 for n distinct
blocks (~1e-8 at a million blocks).

`replay.trace.keys.ChunkKeyer` gives the same prefix semantics with exact keys; this one exists
because the simulator keys ~300K new blocks per paper-scale run and must stay inside its time
budget. One request is one call of `replay.sim.keying_kernel.key_blocks` (numba): the prefix
compare, the block hashes (each token id's mix from a table built once per run) and the dense ids
(an open-addressing table of prefix hash -> id) in one pass. Keying the paper-scale trace's 4,455
calls took 0.25-0.34 s of CPU with the vectorized numpy code and a dict of ids it replaces, and
0.09-0.14 s compiled (same process, alternating rounds, same keys; docs/simulator.md).
"""

from __future__ import annotations

import numpy as np

from replay.sim.keying_kernel import TOKEN_MUL, key_blocks, rehash
from replay.trace.tokens import splitmix64

__all__ = ["TaskKeyer"]

_M = np.uint64(0x9E3779B97F4A7C15 | 1)
_MINV = np.uint64(pow(int(_M), -1, 1 << 64))
_TABLE_MAX = 1 << 21  # ids below this get a table entry (16 MiB at most, ~1 MiB usually)


class TaskKeyer:
    """Dense int64 keys of the full blocks of (prompt + output), reusing each task's previous keys."""

    def __init__(self, block_tokens: int):
        if block_tokens <= 0:
            raise ValueError("block_tokens must be positive")
        self.block_tokens = block_tokens
        self._n_ids = 0  # distinct prefix hashes seen: the next dense id
        # prefix hash -> id, open addressing: (hash, id + 1) in slots 2i and 2i+1 (0: free)
        self._table = np.zeros(2 << 12, dtype=np.uint64)
        # per task: the previous prompt and output, its key and prefix-hash buffers, its blocks
        self._last: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]] = {}
        self._pow = np.ones(1, dtype=np.uint64)
        self._powinv = np.ones(1, dtype=np.uint64)
        with np.errstate(over="ignore"):
            self._tokw = splitmix64(np.arange(block_tokens, dtype=np.uint64)) | np.uint64(1)
        self._tokmix = np.empty(0, dtype=np.uint64)  # the mix of each token id below its length
        empty_ids = np.empty(0, dtype=np.int32)
        self._none = (empty_ids, empty_ids, np.empty(0, np.int64), np.empty(0, np.uint64), 0)

    def __len__(self) -> int:
        return self._n_ids

    def _powers(self, n: int) -> None:
        have = len(self._pow)
        if n <= have:
            return
        m = max(n, 2 * have)
        with np.errstate(over="ignore"):
            p = np.empty(m, dtype=np.uint64)
            q = np.empty(m, dtype=np.uint64)
            p[:have], q[:have] = self._pow, self._powinv
            for i in range(have, m):  # grows geometrically; amortized O(1) per block
                p[i] = p[i - 1] * _M
                q[i] = q[i - 1] * _MINV
        self._pow, self._powinv = p, q

    def keys(self, task: str, prompt: np.ndarray, output: np.ndarray) -> np.ndarray:
        prompt = np.ascontiguousarray(prompt, dtype=np.int32)
        output = np.ascontiguousarray(output, dtype=np.int32)
        n = (len(prompt) + len(output)) // self.block_tokens
        self._powers(n + 1)
        self._room(n)
        pprompt, pout, kbuf, pbuf, n_prev = self._last.get(task, self._none)
        kbuf, pbuf, n, self._n_ids, missed = key_blocks(
            prompt,
            output,
            pprompt,
            pout,
            kbuf,
            pbuf,
            n_prev,
            self.block_tokens,
            self._tokmix,
            self._tokw,
            self._pow,
            self._powinv,
            self._table,
            self._n_ids,
        )
        if 0 <= missed < _TABLE_MAX:  # ids past the mix table: grow it for the next calls
            self._grow_mix(missed)
        self._last[task] = (prompt, output, kbuf, pbuf, n)
        keys = kbuf[:n]
        keys.flags.writeable = False  # the task's later calls share the buffer past n
        return keys

    def _room(self, n_new: int) -> None:
        """Keep the id table at most half full after `n_new` more ids (linear probing)."""
        size = len(self._table) // 2
        if 2 * (self._n_ids + n_new) <= size:
            return
        while 2 * (self._n_ids + n_new) > size:
            size *= 2
        table = np.zeros(2 * size, dtype=np.uint64)
        rehash(self._table, table)
        self._table = table

    def _grow_mix(self, top: int) -> None:
        n = max(top + 1, 2 * len(self._tokmix))
        self._tokmix = splitmix64(np.arange(n, dtype=np.uint64) * TOKEN_MUL)

    def forget(self, task: str) -> None:
        self._last.pop(task, None)
