"""Block keys of each request's prompt + output, computed incrementally per task and vectorized.

A block's key stands for every token up to its end (prefix-chained, as vLLM's block hashes): the
64-bit prefix hash P_i = sum_j h_j * M^(i-j) mod 2^64 over per-block content hashes h_j, computed
with one cumulative sum (M is odd, so M^-1 exists mod 2^64), then mapped to dense int ids in order
of first appearance. Only the blocks after the common prefix with the task's previous context are
hashed. Collisions need two different prefixes with equal 64-bit hashes: about n^2 / 2^65 for n
distinct blocks (~1e-8 at a million blocks).

`replay.trace.keys.ChunkKeyer` gives the same prefix semantics with exact keys; this one exists
because the simulator keys ~300K new blocks per paper-scale run and must stay inside its time
budget (a vectorized hash instead of a Python loop per block). Each token id's mix is computed once
per run, into a table the block hash gathers from (a dozen array operations less per call).
"""

from __future__ import annotations

import numpy as np

from replay.trace.tokens import splitmix64

__all__ = ["TaskKeyer", "common_prefix"]

_M = np.uint64(0x9E3779B97F4A7C15 | 1)
_MINV = np.uint64(pow(int(_M), -1, 1 << 64))
_TOKEN_MUL = np.uint64(0xD6E8FEB86659FD93)
_TABLE_MAX = 1 << 21  # ids below this get a table entry (16 MiB at most, ~1 MiB usually)


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common prefix of two int arrays."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    neq = a[:n] != b[:n]
    i = int(neq.argmax())
    return i if neq[i] else n


class TaskKeyer:
    """Dense int64 keys of the full blocks of (prompt + output), reusing each task's previous keys."""

    def __init__(self, block_tokens: int):
        if block_tokens <= 0:
            raise ValueError("block_tokens must be positive")
        self.block_tokens = block_tokens
        self._ids: dict[int, int] = {}
        self._last: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
        self._pow = np.ones(1, dtype=np.uint64)
        self._powinv = np.ones(1, dtype=np.uint64)
        with np.errstate(over="ignore"):
            self._tokw = splitmix64(np.arange(block_tokens, dtype=np.uint64)) | np.uint64(1)
        self._tokmix = np.empty(0, dtype=np.uint64)  # the mix of each token id below its length

    def __len__(self) -> int:
        return len(self._ids)

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

    def _token_mix(self, tokens: np.ndarray) -> np.ndarray:
        """splitmix64(token * _TOKEN_MUL) of each int32 token, gathered from a table that grows
        to the largest id seen (a vocabulary's worth). Read as uint32, a negative id is out of
        range like a large one: the gather raises instead of wrapping, and the id gets its mix
        computed directly. uint64 array arithmetic wraps silently, only numpy scalars warn."""
        u = tokens.view(np.uint32)
        try:
            return self._tokmix.take(u)
        except IndexError:
            pass
        top = int(u.max())
        if top >= _TABLE_MAX:
            return splitmix64(tokens.astype(np.uint64) * _TOKEN_MUL)
        n = max(top + 1, 2 * len(self._tokmix))
        self._tokmix = splitmix64(np.arange(n, dtype=np.uint64) * _TOKEN_MUL)
        return self._tokmix.take(u)

    def _block_hashes(self, tokens: np.ndarray) -> np.ndarray:
        x = self._token_mix(tokens).reshape(-1, self.block_tokens)
        return splitmix64((x * self._tokw).sum(axis=1, dtype=np.uint64))

    def keys(self, task: str, prompt: np.ndarray, output: np.ndarray) -> np.ndarray:
        prompt = np.asarray(prompt, dtype=np.int32)
        output = np.asarray(output, dtype=np.int32)
        b = self.block_tokens
        n_p = len(prompt)
        n = (n_p + len(output)) // b
        keys = np.empty(n, dtype=np.int64)
        pre = np.empty(n, dtype=np.uint64)  # raw prefix hashes
        prev = self._last.get(task)
        r = 0
        if prev is not None:
            pprompt, pout, pkeys, ppre = prev
            # common prefix of (prompt + output) with the previous (prompt + output), piecewise
            cp = common_prefix(pprompt, prompt)
            if cp == len(pprompt) < n_p:
                cp += common_prefix(pout, prompt[cp:])
            if cp == n_p:  # the whole prompt is old context: the output may go on matching
                cp += common_prefix(np.concatenate([pprompt, pout])[n_p:], output)
            r = min(cp // b, len(pkeys), n)
            keys[:r] = pkeys[:r]
            pre[:r] = ppre[:r]
        if r < n:
            self._powers(n + 1)
            start = r * b
            if start >= n_p:
                tail = output[start - n_p : n * b - n_p]
            else:
                tail = np.concatenate([prompt[start:], output])[: n * b - start]
            h = self._block_hashes(tail)
            acc = np.cumsum(h * self._powinv[r:n], dtype=np.uint64)
            if r:  # numpy scalars warn on wrapping: multiply as one-element arrays
                acc += pre[r - 1 : r] * self._powinv[r - 1 : r]
            p = acc * self._pow[r:n]
            pre[r:] = p
            keys[r:] = self._dense(p.tolist())
        self._last[task] = (prompt, output, keys, pre)
        return keys

    def _dense(self, hashes: list[int]) -> np.ndarray:
        """Dense ids of prefix hashes (one context's, in order), new ones numbered in order.

        A key is only ever added together with every prefix before it, so along one context the
        known keys are a leading run: a binary search finds where it ends, and the rest are new
        and take consecutive ids (no Python call per block). A 64-bit collision, whose odds the
        module docstring gives, would merge two prefixes here as it would anywhere."""
        ids = self._ids
        lo, hi = 0, len(hashes)  # hashes[:lo] known, hashes[hi:] new
        while lo < hi:
            mid = (lo + hi) // 2
            if hashes[mid] in ids:
                lo = mid + 1
            else:
                hi = mid
        n0 = len(ids)
        out = np.empty(len(hashes), dtype=np.int64)
        out[:lo] = list(map(ids.__getitem__, hashes[:lo]))
        out[lo:] = np.arange(n0, n0 + len(hashes) - lo, dtype=np.int64)
        ids.update(zip(hashes[lo:], range(n0, n0 + len(hashes) - lo), strict=True))
        return out

    def forget(self, task: str) -> None:
        self._last.pop(task, None)
