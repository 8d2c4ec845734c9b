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

from replay.errors import ConfigError
from replay.model.closed_form import pressure_ratio, working_set_bytes
from replay.model.order import (
    ORDERS,
    Pacing,
    Schedule,
    ServiceModel,
    closed_loop_schedule,
    trace_schedule,
)
from replay.model.presets import GIB
from replay.model.ranges import (
    RANGE_DERIVATION,
    RANGE_JITTER,
    RANGE_SEEDS,
    QueuedModels,
    add_ranges,
    service_bounds,
)
from replay.model.streams import KeyedTrace, key_trace
from replay.model.tier_model import TierModel, TierPrediction, host_capacity_chunks
from replay.trace.model import CallRef, Trace

__all__ = [
    "TierPrediction",
    "TierModel",
    "predict_tiers",
    "host_capacity_chunks",
    "resolve_schedule",
]

MODEL_NAME = "lru-stack-depth"


def resolve_schedule(
    trace: Trace,
    order: str | Sequence[CallRef] | Schedule,
    pool: int,
    service: ServiceModel | None = None,
    gap_scale: float = 1.0,
    timing: str = "think",
) -> Schedule:
    """A Schedule for an order name (`trace`, `pool`), call refs (one after another) or a Schedule;
    the pool's closed loop paces its gaps as a run with `gap_scale` and `timing` would."""
    if isinstance(order, Schedule):
        return order
    if isinstance(order, str):
        if order == "trace":
            return trace_schedule(trace)
        if order == "pool":
            return closed_loop_schedule(
                trace, pool, service=service, gap_scale=gap_scale, timing=timing
            )
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
    ranges: bool = False,
    queue: bool = False,
    gap_scale: float = 1.0,
    timing: str = "think",
) -> dict:
    """Predicted counters per host tier, plus the closed form, as one JSON-ready dict.

    `order`: "pool" (closed loop of `pool` slots in virtual time, the calls' service times from
    `service`, default `ServiceModel()`; use `ServiceModel.from_presets` for the run's hardware),
    "trace" (calls one after another in trace order: a pool of one), call refs (one after another
    in that order), or a `Schedule` (a recorded run's times:
    `replay.model.run_order.read_run_schedule`). `offload_pays=False` skips the search for
    `offload_pays_from_gib` (null; with `queue` it is searched on the unqueued loop).

    `queue=True` (order "pool"): calls wait in the engine's queue for device space and prefill
    compute and look up when admitted (`replay.model.service.EngineQueue`), one schedule per tier.
    `ranges=True` (order "pool" with a roofline `service`) adds `<quantity>_low` / `_high` to every
    tier row and a `range` entry saying how they were derived (`replay.model.ranges`).
    `gap_scale` and `timing` (order "pool"): the run's, which decide when its calls are sent (a
    sweep whose runs shrink the recorded gaps was predicted at the recorded ones).
    """
    if bytes_per_token <= 0:
        raise ConfigError("predict", "bytes_per_token", f"must be positive, got {bytes_per_token}")
    if device_tokens < 0:
        raise ConfigError("predict", "device_tokens", f"must be >= 0, got {device_tokens}")
    if pool < 1:
        raise ConfigError("predict", "pool", f"must be at least 1, got {pool}")
    capacities = [host_capacity_chunks(t, chunk_tokens, bytes_per_token) for t in tiers_gib]
    order_name = order if isinstance(order, str) else "given"
    closed_loop = isinstance(order, str) and order == "pool"
    pacing = Pacing(gap_scale=gap_scale, timing=timing)
    schedule = resolve_schedule(trace, order, pool, service, **pacing)
    keyed = key_trace(trace, chunk_tokens, block_tokens if device_tokens > 0 else None)
    model = TierModel(keyed, schedule, device_tokens // block_tokens if device_tokens else 0)
    queued = None
    if queue and closed_loop:
        svc = service or ServiceModel()
        queued = QueuedModels(keyed, trace, pool, svc, device_tokens, model, pacing)
    points = [queued.at(cap) if queued else model for cap in capacities]
    mean_prompt = model.prompt_tokens / model.calls if model.calls else 0.0
    # a trace of fewer tasks than slots never has more agents active than it has tasks
    ws = working_set_bytes(min(pool, max(1, len(trace.tasks))), mean_prompt, bytes_per_token)
    tiers = []
    for gib, cap, point in zip(tiers_gib, capacities, points, strict=True):
        row = point.at(cap, float(gib)).to_dict()
        p = pressure_ratio(ws, float(gib))
        row["pressure_ratio"] = None if math.isinf(p) else p
        tiers.append(row)
    range_doc = None
    if ranges:
        range_doc = _ranges(
            tiers, capacities, points, keyed, trace, closed_loop, pool, service, queued, pacing
        )
    pays = model.pays_from_chunks() if offload_pays else None
    chunk_bytes = chunk_tokens * bytes_per_token
    out = {
        "model": MODEL_NAME,
        "order": order_name,
        "engine_queue": queued is not None,
        "pool": pool,
        "gap_scale": gap_scale,
        "timing": timing,
        "calls": model.calls,
        "prompt_tokens": model.prompt_tokens,
        "mean_prompt_tokens": mean_prompt,
        "bytes_per_token": bytes_per_token,
        "chunk_tokens": chunk_tokens,
        "block_tokens": block_tokens,
        "device_tokens": device_tokens,
        # per tier with the queue (each tier has its own schedule); here the first tier's
        "device_hit_tokens": points[0].device_hit_tokens if points else model.device_hit_tokens,
        "host_chunk_references": model.host_refs,
        "working_set_gib": ws / GIB,
        "offload_pays_from_gib": None if pays is None else pays * chunk_bytes / GIB,
        # null above means "never" only when searched: --no-pays leaves it unsearched
        "offload_pays_searched": offload_pays,
        "tiers": tiers,
    }
    if range_doc is not None:
        out["range"] = range_doc
    return out


def _ranges(
    tiers: list[dict],
    capacities: list[int],
    points: list[TierModel],
    keyed: KeyedTrace,
    trace: Trace,
    closed_loop: bool,
    pool: int,
    service: ServiceModel | None,
    queued: QueuedModels | None,
    pacing: Pacing,
) -> dict:
    """Low/high per tier from the bounding schedules (`replay.model.ranges`), or why not."""
    if not closed_loop:
        return {
            "unavailable": "ranges come from the closed loop's service bounds: order must be pool"
        }
    if service is None or service.step is None:
        return {"unavailable": "ranges need a roofline service model (a hardware preset)"}
    if queued is not None:
        bounds = [queued.bounds(cap) for cap in capacities]
    else:
        blocks = points[0].device_blocks if points else 0
        others = [
            TierModel(keyed, s, blocks)
            for s in service_bounds(trace, pool, service, **pacing).values()
        ]
        bounds = [others] * len(capacities)
    add_ranges(tiers, capacities, points, bounds)
    return {
        "method": "service_bounds",
        "derivation": RANGE_DERIVATION,
        "jitter": RANGE_JITTER,
        "seeds": RANGE_SEEDS,
        "engine_queue": queued is not None,
    }
