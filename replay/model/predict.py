"""Tier predictions: computed prefill, restores and writes per host tier size, from LRU stack depths.

Semantics (shared with the simulator's write-through, `all` admission, pure LRU host tier):
- The host tier holds full `chunk_tokens` chunks of prompts; capacity K = floor(host bytes /
  (chunk_tokens * bytes_per_token)). A lookup touches the prompt's present chunks; at the end of
  its prefill every chunk still missing is written (`host_write_tokens`).
- A call's host coverage is the unbroken run of present chunks from its first chunk; restores are
  the part of it beyond the device-resident prefix (and before the prompt's last token, which is
  always computed); computed prefill is the prompt minus device hits minus restores.
- The device tier is the same LRU model at `block_tokens` granularity with capacity
  `device_tokens / block_tokens` blocks: a lookup takes the resident run of prompt blocks, the
  prefill's end stores the prompt's blocks, the call's end its context blocks (prompt + output but
  its last token), tail first. Approximation: blocks held by running requests are not pinned and
  preemption is not modelled, so with many long prompts in flight it can misjudge device hits.
- When each call looks up, finishes its prefill and ends comes from a `Schedule` (see
  `replay.model.order`): the trace order, a simulated closed loop for the pool, or a recorded run.

Pure: the schedule arrives as a name, call refs or a Schedule, never as a path.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from replay.errors import ConfigError
from replay.model.closed_form import pressure_ratio, working_set_bytes
from replay.model.lru_events import device_pass, host_pass
from replay.model.order import (
    ORDERS,
    Schedule,
    ServiceModel,
    closed_loop_schedule,
    trace_schedule,
)
from replay.model.presets import GIB
from replay.model.streams import KeyedTrace, build_stream, key_trace, order_indices
from replay.trace.model import CallRef, Trace

__all__ = [
    "TierPrediction",
    "TierModel",
    "predict_tiers",
    "host_capacity_chunks",
    "resolve_schedule",
]

MODEL_NAME = "lru-stack-depth"


def host_capacity_chunks(tier_gib: float, chunk_tokens: int, bytes_per_token: float) -> int:
    """Chunks a host tier of `tier_gib` GiB holds: floor(bytes / (chunk_tokens * bytes_per_token))."""
    if tier_gib < 0:
        raise ConfigError("predict", "tiers_gib", f"tier sizes must be >= 0, got {tier_gib}")
    return int(math.floor(tier_gib * GIB / (chunk_tokens * bytes_per_token)))


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
            "computed_prefill_tokens": self._prompt_len - self._device_prefix - restore,
            # no tier, nothing written (the engine has nowhere to put it)
            "host_write_tokens": written * c if capacity_chunks > 0 else np.zeros_like(written),
        }

    def at(self, capacity_chunks: int, tier_gib: float = math.nan) -> TierPrediction:
        """Whole-run counters for a host tier of `capacity_chunks` chunks."""
        p = self.per_call(capacity_chunks)
        return TierPrediction(
            host_tier_gib=tier_gib,
            host_capacity_chunks=int(capacity_chunks),
            computed_prefill_tokens=int(p["computed_prefill_tokens"].sum()),
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


def resolve_schedule(
    trace: Trace,
    order: str | Sequence[CallRef] | Schedule,
    pool: int,
    service: ServiceModel | None = None,
) -> Schedule:
    """A Schedule for an order name (`trace`, `pool`), call refs (one after another) or a Schedule."""
    if isinstance(order, Schedule):
        return order
    if isinstance(order, str):
        if order == "trace":
            return trace_schedule(trace)
        if order == "pool":
            return closed_loop_schedule(trace, pool, service=service)
        hint = " (resolve run:DIR at the edge: replay.model.run_order.read_run_schedule)"
        raise ConfigError(
            "predict",
            "order",
            f"unknown order {order!r}; valid: {', '.join(ORDERS)}, call refs or a Schedule"
            + (hint if order.startswith("run:") else ""),
        )
    return Schedule.sequential(list(order))


def predict_tiers(
    trace: Trace,
    *,
    pool: int,
    bytes_per_token: float,
    chunk_tokens: int,
    device_tokens: int,
    tiers_gib: Sequence[float],
    order: str | Sequence[CallRef] | Schedule = "pool",
    block_tokens: int = 16,
    offload_pays: bool = True,
    service: ServiceModel | None = None,
) -> dict:
    """Predicted counters per host tier, plus the closed form, as one JSON-ready dict.

    `order`: "pool" (closed loop of `pool` slots in virtual time, the calls' service times from
    `service`, default `ServiceModel()`; use `ServiceModel.from_presets` for the run's hardware),
    "trace" (calls one after another in trace order: a pool of one), call refs (one after another
    in that order), or a `Schedule` (a recorded run's times:
    `replay.model.run_order.read_run_schedule`). `offload_pays=False` skips the search for
    `offload_pays_from_gib` (null).
    """
    if bytes_per_token <= 0:
        raise ConfigError("predict", "bytes_per_token", f"must be positive, got {bytes_per_token}")
    if device_tokens < 0:
        raise ConfigError("predict", "device_tokens", f"must be >= 0, got {device_tokens}")
    if pool < 1:
        raise ConfigError("predict", "pool", f"must be at least 1, got {pool}")
    capacities = [host_capacity_chunks(t, chunk_tokens, bytes_per_token) for t in tiers_gib]
    order_name = order if isinstance(order, str) else "given"
    schedule = resolve_schedule(trace, order, pool, service)
    keyed = key_trace(trace, chunk_tokens, block_tokens if device_tokens > 0 else None)
    model = TierModel(keyed, schedule, device_tokens // block_tokens if device_tokens else 0)
    mean_prompt = model.prompt_tokens / model.calls if model.calls else 0.0
    ws = working_set_bytes(pool, mean_prompt, bytes_per_token)
    tiers = []
    for gib, cap in zip(tiers_gib, capacities, strict=True):
        row = model.at(cap, float(gib)).to_dict()
        p = pressure_ratio(ws, float(gib))
        row["pressure_ratio"] = None if math.isinf(p) else p
        tiers.append(row)
    pays = model.pays_from_chunks() if offload_pays else None
    chunk_bytes = chunk_tokens * bytes_per_token
    return {
        "model": MODEL_NAME,
        "order": order_name,
        "pool": pool,
        "calls": model.calls,
        "prompt_tokens": model.prompt_tokens,
        "mean_prompt_tokens": mean_prompt,
        "bytes_per_token": bytes_per_token,
        "chunk_tokens": chunk_tokens,
        "block_tokens": block_tokens,
        "device_tokens": device_tokens,
        "device_hit_tokens": model.device_hit_tokens,
        "host_chunk_references": model.host_refs,
        "working_set_gib": ws / GIB,
        "offload_pays_from_gib": None if pays is None else pays * chunk_bytes / GIB,
        "tiers": tiers,
    }
