"""Held-out check of the working-set model: calibrate on half the tasks, predict the other half
and another pool size, compare with the simulator.

The model (`replay.model.predict.predict_tiers`) has one input the study could not measure
directly: how much of the device KV really keeps finished prefixes (the running batch holds part
of it). Calibration fits that one number, the effective device size, on the calibration half (so
that the model's no-tier computed prefill equals the simulator's), then predicts computed prefill
at every tier for the held-out half, at the calibration pool and at another pool, without looking
at their runs. Both the nominal (unfitted) and the calibrated predictions are reported.

    python -m replay.studies.efficientagent.holdout   # paper scale, ~3 min on 2 cores

Small: `--tasks 32 --scale 0.25 --device-kv-gib 1 --out /tmp/h` (the paper page then names the
reduced setup it shows).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from replay.errors import ConfigError
from replay.model.order import ServiceModel
from replay.model.predict import predict_tiers
from replay.model.presets import GIB, get_hardware, get_model
from replay.trace.model import Trace

__all__ = ["HoldoutSpec", "split_tasks", "measure", "calibrate_device_tokens", "run_holdout"]


# experiments/paper-h20.toml's engine settings beyond the sizes below (a test keeps the two equal)
PAPER_H20_ENGINE: tuple[tuple[str, Any], ...] = (
    ("kappa", 8),
    ("jitter", 0.05),
    ("seed", 0),
    ("blocking_transfers", True),
    ("host_link_efficiency", 0.65),
)


@dataclass(frozen=True)
class HoldoutSpec:
    """The workload and engine of the check: by default paper-h20's (its trace, pool, tiers,
    device, chunk and engine settings, `admission = "all"`); `engine` holds the SimConfig
    fields beyond the sizes."""

    tasks: int = 100
    seed: int = 0
    scale: float = 1.0
    pool: int = 16
    other_pool: int = 8
    tiers_gib: tuple[float, ...] = (0, 5, 10, 20, 40)
    hardware: str = "h20"
    model: str = "qwen3-coder-30b-a3b"
    tp: int = 8
    device_kv_gib: float = 6.0
    chunk_tokens: int = 1024
    block_tokens: int = 16
    engine: tuple[tuple[str, Any], ...] = PAPER_H20_ENGINE

    def describe(self) -> str:
        """The setup in one sentence, for the page that shows the check's numbers."""
        paper = self == HoldoutSpec()
        extra = ", ".join(f"{k} {v}" for k, v in self.engine)
        return (
            f"Setup: {self.tasks} SWE-agent tasks at scale {self.scale:g} (seed {self.seed}), "
            f"{self.hardware} {self.model} TP{self.tp}, {self.device_kv_gib:g} GiB device KV a "
            f"rank, {self.chunk_tokens}-token host chunks, {extra}"
            + (": paper-h20's." if paper else ": a reduced setup, not paper-h20's.")
        )


def split_tasks(trace: Trace) -> tuple[Trace, Trace]:
    """(calibration, held-out): root tasks alternate between the halves, in trace order, so both
    halves draw from the same distribution; sub-agent tasks follow their parent."""
    roots = trace.root_task_ids
    cal_roots = set(roots[0::2])
    owner: dict[str, bool] = {}
    for task, calls in trace.tasks.items():
        parent = calls[0].parent
        owner[task] = owner[parent[0]] if parent is not None else task in cal_roots
    cal = [c for c in trace.calls if owner[c.task]]
    held = [c for c in trace.calls if not owner[c.task]]
    return Trace(trace.header, cal), Trace(trace.header, held)


def measure(
    trace: Trace, spec: HoldoutSpec, pool: int, tier_gib: float, **sim: Any
) -> dict[str, Any]:
    """One simulated replay (virtual time) of `trace`: its counters and makespan. `sim`: more
    `SimConfig` fields (admission, kappa, ...)."""
    from replay.clock import VirtualTimeLoop
    from replay.driver.options import RunOptions
    from replay.driver.pool import replay
    from replay.sim.options import SimConfig
    from replay.sim.transport import SimTransport

    cfg = SimConfig(
        hardware=spec.hardware,
        model=spec.model,
        tp=spec.tp,
        device_kv_gib=spec.device_kv_gib,
        host_tier_gib=tier_gib,
        chunk_tokens=spec.chunk_tokens,
        block_tokens=spec.block_tokens,
        **{**dict(spec.engine), **sim},
    )
    transport = SimTransport(cfg, vocab_size=trace.header.vocab_size)
    loop = VirtualTimeLoop()
    try:
        result = loop.run_until_complete(
            replay(trace, transport, RunOptions(pool=pool, forcing=True))
        )
    finally:
        loop.close()
    counters: dict[str, Any] = dict(transport.counters())
    ends = [r["t_end"] for r in result.rows if r.get("t_end") is not None]
    counters["makespan_s"] = max(ends) if ends else None
    return counters


def _predict(trace: Trace, spec: HoldoutSpec, pool: int, device_tokens: int) -> list[dict]:
    model = get_model(spec.model)
    return predict_tiers(
        trace,
        pool=pool,
        bytes_per_token=model.bytes_per_token(spec.tp),
        chunk_tokens=spec.chunk_tokens,
        device_tokens=device_tokens,
        tiers_gib=list(spec.tiers_gib),
        block_tokens=spec.block_tokens,
        offload_pays=False,
        service=ServiceModel.from_presets(model, get_hardware(spec.hardware), spec.tp),
        queue=True,  # the engine's admission queue, as the sweep's pre-registered predictions use
    )["tiers"]


def _predict_no_tier(trace: Trace, spec: HoldoutSpec, pool: int, device_tokens: int) -> float:
    spec0 = HoldoutSpec(**{**spec.__dict__, "tiers_gib": (0,)})
    return float(_predict(trace, spec0, pool, device_tokens)[0]["computed_prefill_tokens"])


def calibrate_device_tokens(
    trace: Trace, spec: HoldoutSpec, pool: int, measured_computed: float, nominal_tokens: int
) -> int:
    """The device size (tokens, a multiple of the block) at which the model's no-tier computed
    prefill matches `measured_computed`: bisection (computed prefill falls as the device grows)."""
    b = spec.block_tokens
    lo, hi = 0, max(b, nominal_tokens // b * b)
    if _predict_no_tier(trace, spec, pool, hi) >= measured_computed:
        return hi
    for _ in range(12):
        if hi - lo <= b:
            break
        mid = (lo + hi) // 2 // b * b
        if _predict_no_tier(trace, spec, pool, mid) > measured_computed:
            lo = mid
        else:
            hi = mid
    return hi


def _err(pred: float, meas: float) -> float | None:
    return (pred - meas) / meas if meas else None


def _worst(rows: list[dict[str, Any]], key: str) -> str:
    errs = [abs(r[key]) for r in rows if r.get(key) is not None]
    return f"{max(errs) * 100:.1f}%" if errs else "-"


def _summary(
    rows: list[dict[str, Any]],
    spec: HoldoutSpec,
    n_cal: int,
    n_held: int,
    fitted: int,
    nominal: int,
) -> str:
    """In words: the held-out errors far above the working set (the two largest tiers) and with no
    tier, for the nominal and the calibrated device size."""
    held = [r for r in rows if r["set"] == "held-out"]
    if not held:
        return "No held-out rows."
    top = sorted(spec.tiers_gib)[-2:]
    large = [r for r in held if r["host_tier_gib"] in top]
    parts = []
    for pool in (spec.pool, spec.other_pool):
        none = [r for r in held if r["pool"] == pool and r["host_tier_gib"] == 0]
        parts.append(
            f"pool {pool}: nominal {_worst(none, 'error_raw')}, calibrated {_worst(none, 'error')}"
        )
    return (
        f"Calibrated on {n_cal} tasks at pool {spec.pool}: effective device {fitted:,} of "
        f"{nominal:,} tokens. Held out ({n_held} other tasks, pools {spec.pool} and "
        f"{spec.other_pool}): at {' and '.join(f'{t:g}' for t in top)} GiB the computed prefill "
        f"is predicted within {_worst(large, 'error_raw')} (nominal device) and "
        f"{_worst(large, 'error')} (calibrated); with no tier the worst errors are "
        + "; ".join(parts)
        + "."
    )


def run_holdout(spec: HoldoutSpec, echo=lambda s: None) -> dict[str, Any]:
    """Calibrate on half the tasks at `spec.pool`, predict the other half at `spec.pool` and
    `spec.other_pool`; a JSON-ready dict with one row per (half, pool, tier)."""
    from replay.trace.synth import synth

    trace = synth("swe-agent", tasks=spec.tasks, seed=spec.seed, scale=spec.scale)
    cal, held = split_tasks(trace)
    if not cal.tasks or not held.tasks:  # a check with an empty half would still be published
        raise ConfigError("holdout", "--tasks", f"needs >= 2 root tasks, got {spec.tasks}")
    nominal = int(spec.device_kv_gib * GIB) // get_model(spec.model).bytes_per_token(spec.tp)
    echo(f"calibration half: {len(cal)} calls; held-out half: {len(held)} calls")
    cal_meas = {t: measure(cal, spec, spec.pool, t) for t in spec.tiers_gib}
    base = cal_meas[min(spec.tiers_gib)]["computed_prefill_tokens"]
    fitted = calibrate_device_tokens(cal, spec, spec.pool, base, nominal)
    echo(f"effective device: {fitted:,} of {nominal:,} tokens")
    rows: list[dict[str, Any]] = []
    for name, tr, pool, meas in (
        ("calibration", cal, spec.pool, cal_meas),
        ("held-out", held, spec.pool, None),
        ("held-out", held, spec.other_pool, None),
    ):
        if meas is None:
            meas = {t: measure(tr, spec, pool, t) for t in spec.tiers_gib}
        raw = _predict(tr, spec, pool, nominal)
        fit = _predict(tr, spec, pool, fitted)
        for t, r, f in zip(spec.tiers_gib, raw, fit, strict=True):
            m = float(meas[t]["computed_prefill_tokens"])
            rows.append(
                {
                    "set": name,
                    "pool": pool,
                    "host_tier_gib": float(t),
                    "measured": m,
                    "predicted_raw": float(r["computed_prefill_tokens"]),
                    "error_raw": _err(float(r["computed_prefill_tokens"]), m),
                    "predicted": float(f["computed_prefill_tokens"]),
                    "error": _err(float(f["computed_prefill_tokens"]), m),
                }
            )
        echo(f"{name} pool {pool}: done")
    summary = _summary(rows, spec, len(cal.tasks), len(held.tasks), fitted, nominal)
    return {
        "spec": {**spec.__dict__, "engine": dict(spec.engine)},
        "setup": spec.describe(),
        "device_tokens_nominal": nominal,
        "device_tokens_fitted": fitted,
        "rows": rows,
        "summary": summary,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m replay.studies.efficientagent.holdout", description=__doc__
    )
    ap.add_argument("--tasks", type=int, default=100)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--device-kv-gib", type=float, default=HoldoutSpec.device_kv_gib)
    ap.add_argument("--out", default="results/paper-holdout")
    args = ap.parse_args(argv)
    spec = HoldoutSpec(tasks=args.tasks, scale=args.scale, device_kv_gib=args.device_kv_gib)
    try:
        doc = run_holdout(spec, echo=lambda s: print(s, file=sys.stderr))
    except ConfigError as e:  # bad --tasks, --scale or --device-kv-gib: one line, as the CLI
        print(f"replay: {e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / ".holdout.json.tmp"
    tmp.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    tmp.replace(out / "holdout.json")
    print(doc["summary"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
