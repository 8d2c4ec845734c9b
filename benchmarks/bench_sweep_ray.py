"""Sweep benchmark: the quick sweep's wall time run one after another here, beside the same sweep
as Ray tasks on a private local Ray with two slots (`replay sweep experiments/quick.toml --ray
local`, `[cluster] local_cpus = 2`). Ray's start-up is timed apart from the sweep, since a
cluster is started once and then runs many sweeps. Skipped, with a line saying so, when the
`ray` extra is not installed (make setup-ray)."""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time

from replay.sweep.config import load_experiment
from replay.sweep.runner import run_sweep

EXPERIMENT = os.environ.get("BENCH_SWEEP_EXP", "experiments/quick.toml")
SLOTS = 2


def _timed_sweep(exp) -> float:
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as root:
        t0 = time.perf_counter()
        result = run_sweep(exp, results_root=root, echo=lambda s: None)
        wall_s = time.perf_counter() - t0
    bad = [o for o in result.outcomes if o.status != "ok"]
    if bad:
        raise RuntimeError(f"{bad[0].rel_dir}: {bad[0].status} ({bad[0].reason})")
    return wall_s


def run() -> dict:
    try:
        import ray
    except ImportError:
        line = "ray is not installed: pip install 'replay[ray]' (make setup-ray); skipped"
        print(f"[bench_sweep_ray] {line}")
        return {"skipped": line}
    exp = load_experiment(EXPERIMENT)
    runs = len(exp.points()) * exp.repeats
    sequential_s = _timed_sweep(exp)
    t0 = time.perf_counter()
    ray.init(
        num_cpus=SLOTS,
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=256 * 1024**2,
    )
    start_s = time.perf_counter() - t0
    try:
        cluster = dataclasses.replace(exp.cluster, backend="ray", address="local")
        ray_s = _timed_sweep(dataclasses.replace(exp, cluster=cluster))
    finally:
        ray.shutdown()
    return {
        "experiment": EXPERIMENT,
        "runs": runs,
        "cpus": os.cpu_count(),
        "sequential_wall_s": round(sequential_s, 2),
        "ray_local_slots": SLOTS,
        "ray_start_s": round(start_s, 2),
        "ray_sweep_wall_s": round(ray_s, 2),
        "speedup": round(sequential_s / ray_s, 2),
        "speedup_with_start": round(sequential_s / (ray_s + start_s), 2),
    }
