"""One schedule's tier model: the device pass, and host passes at any capacity.

The semantics are those of `replay.model.predict` (its module docstring); this module holds the
machinery, so that `replay.model.ranges` can build a model per schedule without importing the
prediction entry point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from replay.counters import COMPUTED_PREFILL_TOKENS
from replay.errors import ConfigError
from replay.model.lru_events import device_pass, host_pass
from replay.model.order import Schedule
from replay.model.presets import GIB, MAX_TIER_GIB
from replay.model.streams import KeyedTrace, build_stream, order_indices

__all__ = ["TierPrediction", "TierModel", "host_capacity_chunks"]

INT64_MAX = (1 << 63) - 1  # the passes count chunks in int64


def host_capacity_chunks(tier_gib: float, chunk_tokens: int, bytes_per_token: float) -> int:
    """Chunks a host tier of `tier_gib` GiB holds: floor(bytes / (chunk_tokens * bytes_per_token))."""
    if not 0 <= tier_gib <= MAX_TIER_GIB:
        raise ConfigError(
            "predict",
            "tiers_gib",
            f"tier sizes must be in [0, {MAX_TIER_GIB:,.0f}], got {tier_gib}",
        )
    chunks = tier_gib * GIB / (chunk_tokens * bytes_per_token)
    if not chunks <= INT64_MAX:  # inf (a tiny bytes_per_token) raised OverflowError in int()
        raise ConfigError(
            "predict",
            "bytes_per_token",
            f"a {tier_gib:g} GiB tier holds {chunks:.3g} chunks at {bytes_per_token:g} bytes a "
            "token, past the model's 64-bit counts: give the KV bytes one token takes on one rank",
        )
    return int(math.floor(chunks))


@dataclass(frozen=True)
class TierPrediction:
    """Predicted counters (tokens, whole run) for one host tier size."""

    host_tier_gib: float
    host_capacity_chunks: int
    computed_prefill_tokens: int
    host_restore_tokens: int
    host_write_tokens: int
    host_coverage_tokens: int
    device_hit_tokens: int

    def to_dict(self) -> dict:
        return dict(self.__dict__)


class TierModel:
    """One schedule's device pass, and host passes at any capacity (one O(N log N) pass each)."""

    def __init__(self, keyed: KeyedTrace, schedule: Schedule, device_blocks: int):
        idx = order_indices(keyed, schedule.refs)
        self.schedule = schedule
        self.device_blocks = device_blocks
        self.chunk_tokens = keyed.chunk_tokens
        self.calls = len(idx)
        prompt_len = keyed.prompt_tokens[idx]
        self.prompt_tokens = int(prompt_len.sum())
        self._prompt_len = prompt_len
        self._host = build_stream(keyed.host_keys, idx)
        self.host_refs = len(self._host.keys)
        self._passes: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        device_prefix = self._device_prefix_tokens(keyed, idx, device_blocks)
        self.device_hit_tokens = int(device_prefix.sum())
        self._device_prefix = device_prefix

    def _device_prefix_tokens(
        self, keyed: KeyedTrace, idx: np.ndarray, device_blocks: int
    ) -> np.ndarray:
        """Per call: tokens of the unbroken run of device-resident prompt blocks at its lookup.

        Like vLLM, only blocks that leave at least one prompt token to compute can hit.
        """
        if device_blocks <= 0 or keyed.device_keys is None:
            return np.zeros(len(idx), np.int64)
        assert keyed.block_tokens is not None and keyed.device_prompt_blocks is not None
        dev = build_stream(keyed.device_keys, idx)
        matchable = np.maximum(keyed.prompt_tokens[idx] - 1, 0) // keyed.block_tokens
        hits = device_pass(
            dev.keys,
            dev.offsets,
            self.schedule,
            device_blocks,
            keyed.device_prompt_blocks[idx],
            matchable,
        )
        return hits * keyed.block_tokens

    def _host_pass(self, capacity: int) -> tuple[np.ndarray, np.ndarray]:
        got = self._passes.get(capacity)
        if got is None:
            got = self._passes[capacity] = host_pass(
                self._host.keys, self._host.offsets, self.schedule, capacity
            )
        return got

    def per_call(self, capacity_chunks: int) -> dict[str, np.ndarray]:
        """Per call, in schedule order: prompt, device hits, coverage, restores, computed, writes."""
        run, written = self._host_pass(capacity_chunks)
        c = self.chunk_tokens
        coverage = run * c
        usable = np.minimum(coverage, self._prompt_len - 1)  # the last token is always computed
        restore = np.maximum(0, usable - self._device_prefix)
        return {
            "prompt_tokens": self._prompt_len,
            "device_hit_tokens": self._device_prefix,
            "host_coverage_tokens": coverage,
            "host_restore_tokens": restore,
            COMPUTED_PREFILL_TOKENS: self._prompt_len - self._device_prefix - restore,
            # no tier, nothing written (the engine has nowhere to put it)
            "host_write_tokens": written * c if capacity_chunks > 0 else np.zeros_like(written),
        }

    def at(self, capacity_chunks: int, tier_gib: float = math.nan) -> TierPrediction:
        """Whole-run counters for a host tier of `capacity_chunks` chunks."""
        p = self.per_call(capacity_chunks)
        return TierPrediction(
            host_tier_gib=tier_gib,
            host_capacity_chunks=int(capacity_chunks),
            computed_prefill_tokens=int(p[COMPUTED_PREFILL_TOKENS].sum()),
            host_restore_tokens=int(p["host_restore_tokens"].sum()),
            host_write_tokens=int(p["host_write_tokens"].sum()),
            host_coverage_tokens=int(p["host_coverage_tokens"].sum()),
            device_hit_tokens=self.device_hit_tokens,
        )

    def pays_from_chunks(self) -> int | None:
        """Smallest capacity at which restored tokens reach written tokens (None: never).

        Below it the tier moves more bytes over the host link than it gives back: each written byte
        is read back less than once on average. Restores grow and writes shrink with capacity, so a
        binary search finds the crossing (exactly so under LRU inclusion; the write timing can
        bend that by a chunk or two).
        """
        hi = max(1, len(np.unique(self._host.keys)))  # holds every chunk: nothing is ever evicted
        top = self.at(hi)
        if top.host_restore_tokens < top.host_write_tokens:
            return None
        lo = 1
        while lo < hi:
            mid = (lo + hi) // 2
            p = self.at(mid)
            if p.host_restore_tokens >= p.host_write_tokens:
                hi = mid
            else:
                lo = mid + 1
        self._passes.clear()  # the probes' results are not worth keeping
        return lo
