"""Pre-registered ranges: the model under the service models that bracket a run's timing.

Far from the transition (a host tier above the working set) what a run computes is set by the
device: the host tier holds whole 256-token chunks of earlier prompts, the device also keeps the
previous call's tail (the last partial chunk, the output, 16-token blocks), and whether that tail
survives until the task's next call depends on how much other traffic passes through the device
meanwhile, that is on how long calls stay in flight. Fed a run's own call times, the model matches
the simulator to about a thousand tokens of 4.7M; what is left of its error before the run is the
stand-in server's timing. So the range runs the same closed loop with service models that
bracket that timing, all from the same roofline:

- `fast`: every call decodes alone (batch 1, its own context): no server serves a call faster.
- `slow`: every call decodes in a batch of the whole pool, each sequence as long as its own
  context: every agent in flight at once, the busiest the closed loop can make the batch.
- `jitter-k`: the point's service model with each call's service time stretched by
  1 + 0.05 U(-1, 1) (seeds 0..7): a server whose step times vary, as the paper sweeps' simulated
  engine does (`jitter = 0.05`). Fed any schedule, which call finds a tail block still resident
  flips both ways; these draws measure how far that moves the totals.
- the point estimate: the calls actually in flight when each call is sent, no noise.

Per quantity the range is [min, max] over the eleven (the quantities need not be monotone in the
service time); its width is reported next to it. Outside all of them, and so able to put a
measurement outside the range: requests queueing in the engine for device space or compute (a
lookup then happens at admission, after the send), prefill chunks stalling decodes, preemption,
and restore transfer time. Those matter near the transition, where prefills are long;
docs/model.md says what that does to the 10 GiB point.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from replay.counters import COMPUTED_PREFILL_TOKENS
from replay.errors import ConfigError
from replay.model.order import EngineQueue, Pacing, Schedule, ServiceModel, closed_loop_schedule
from replay.model.streams import KeyedTrace
from replay.model.tier_model import TierModel
from replay.trace.model import CallRef, Trace

__all__ = [
    "RANGE_QUANTITIES",
    "RANGE_DERIVATION",
    "RANGE_JITTER",
    "RANGE_SEEDS",
    "QUEUE_ITERATIONS",
    "service_bounds",
    "QueuedModels",
    "add_ranges",
]

# per-call service-time noise of the perturbed schedules (the paper sweeps' engine jitter)
RANGE_JITTER = 0.05
RANGE_SEEDS = 8
# work -> schedule -> work: two rounds settle the computed prefill to ~0.1% (docs/model.md, lab notes)
QUEUE_ITERATIONS = 2

RANGE_QUANTITIES = (
    COMPUTED_PREFILL_TOKENS,
    "host_restore_tokens",
    "host_write_tokens",
    "host_coverage_tokens",
    "device_hit_tokens",
)

RANGE_DERIVATION = (
    "min and max of the model over eleven closed-loop schedules from the same roofline: every "
    "call decoding alone (fast), decoding in a batch of the whole pool (slow), eight seeded draws "
    "of +-5% per-call service noise, and the batch in flight at each send (the point estimate)"
)


def service_bounds(
    trace: Trace,
    pool: int,
    service: ServiceModel,
    jitter: float = RANGE_JITTER,
    seeds: int = RANGE_SEEDS,
    queue: EngineQueue | None = None,
    gap_scale: float = 1.0,
    timing: str = "think",
) -> dict[str, Schedule]:
    """The closed loop under the fast (batch 1) and slow (batch = pool) service models, and under
    the point's service model with `seeds` seeded draws of +-`jitter` per-call service noise."""
    if service.step is None:
        raise ConfigError(
            "predict", "service", "ranges need a roofline service model (ServiceModel.from_presets)"
        )
    pace = Pacing(gap_scale=gap_scale, timing=timing)
    out = {
        "fast": closed_loop_schedule(
            trace, pool, service=service.with_decode_batch(1), queue=queue, **pace
        ),
        "slow": closed_loop_schedule(
            trace, pool, service=service.with_decode_batch(pool), queue=queue, **pace
        ),
    }
    for seed in range(seeds if jitter > 0 else 0):
        out[f"jitter-{seed}"] = closed_loop_schedule(
            trace,
            pool,
            service=service,
            jitter=jitter,
            rng=np.random.default_rng(seed),
            queue=queue,
            **pace,
        )
    return out


class QueuedModels:
    """Per host tier, the tier model of the closed loop with the engine's queue (`EngineQueue`).

    How long a call waits for device space and prefill compute depends on what it computes, which
    depends on the host tier: start from the unqueued loop's per-call computed prefill at that
    tier, run the queued loop with it, and repeat (`QUEUE_ITERATIONS`). Tiers whose per-call work
    comes out the same (every tier above the working set) share their schedules.
    """

    def __init__(
        self,
        keyed: KeyedTrace,
        trace: Trace,
        pool: int,
        service: ServiceModel,
        device_tokens: int,
        base: TierModel,
        pacing: Pacing | None = None,
    ):
        self.keyed, self.trace, self.pool, self.service = keyed, trace, pool, service
        self.pacing = pacing or Pacing(gap_scale=1.0, timing="think")
        self.device_tokens = device_tokens
        self.base = base
        self._models: dict[tuple[str, bytes], TierModel] = {}
        self._work: dict[int, dict[CallRef, int]] = {}

    def _model(self, name: str, work: dict[CallRef, int], service: ServiceModel, **kw) -> TierModel:
        key = (name, _digest(self.keyed.refs, work))
        got = self._models.get(key)
        if got is None:
            queue = EngineQueue(self.device_tokens, work)
            schedule = closed_loop_schedule(
                self.trace, self.pool, service=service, queue=queue, **self.pacing, **kw
            )
            got = self._models[key] = TierModel(self.keyed, schedule, self.base.device_blocks)
        return got

    def at(self, capacity_chunks: int) -> TierModel:
        """The point estimate's model at this capacity (its work settled by iteration)."""
        model = self.base
        work: dict[CallRef, int] = {}
        for _ in range(QUEUE_ITERATIONS):
            work = _work_of(model, capacity_chunks)
            model = self._model("point", work, self.service)
        self._work[capacity_chunks] = _work_of(model, capacity_chunks)
        return model

    def bounds(self, capacity_chunks: int) -> list[TierModel]:
        """The bounding schedules' models at this capacity, with the point's settled work."""
        work = self._work.get(capacity_chunks)
        if work is None:
            self.at(capacity_chunks)
            work = self._work[capacity_chunks]
        s = self.service
        models = [
            self._model("fast", work, s.with_decode_batch(1)),
            self._model("slow", work, s.with_decode_batch(self.pool)),
        ]
        for seed in range(RANGE_SEEDS):
            rng = np.random.default_rng(seed)
            models.append(self._model(f"jitter-{seed}", work, s, jitter=RANGE_JITTER, rng=rng))
        return models


def _work_of(model: TierModel, capacity_chunks: int) -> dict[CallRef, int]:
    computed = model.per_call(capacity_chunks)[COMPUTED_PREFILL_TOKENS]
    return dict(zip(model.schedule.refs, computed.tolist(), strict=True))


def _digest(refs: Sequence[CallRef], work: dict[CallRef, int]) -> bytes:
    arr = np.fromiter((work.get(r, -1) for r in refs), np.int64, len(refs))
    return hashlib.blake2b(arr.tobytes(), digest_size=16).digest()


def add_ranges(
    rows: list[dict],
    capacities: Sequence[int],
    points: Sequence[TierModel],
    bounds: Sequence[Sequence[TierModel]],
) -> None:
    """`<quantity>_low` / `_high` on every tier row: min and max over the point and its bounds."""
    for row, cap, point, others in zip(rows, capacities, points, bounds, strict=True):
        found = [m.at(cap).to_dict() for m in (point, *others)]
        for q in RANGE_QUANTITIES:
            values = [f[q] for f in found]
            row[f"{q}_low"] = min(values)
            row[f"{q}_high"] = max(values)
