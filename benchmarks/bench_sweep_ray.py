"""Sweep benchmark: the quick sweep's wall time run one after another here, beside the same sweep
as Ray tasks on a private local Ray with two slots (`replay sweep experiments/quick.toml --ray
local`, `[cluster] local_cpus = 2`), each twice. Ray's start-up is timed apart from the sweeps,
since a cluster is started once and then runs many sweeps; the first Ray sweep meets workers
that have not imported the harness yet, the second reuses them.

Where the time goes is measured beside it: the head's predictions (overlapped with the runs on
Ray), one run's own time, a worker's first import of the harness, and shipping a run directory
home. Skipped, with a line saying so, when the `ray` extra is not installed (make setup-ray)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import load_avg_1m, spread
from replay.sweep.config import load_experiment
from replay.sweep.plan import plan_runs
from replay.sweep.runner import SweepRunner, run_sweep

EXPERIMENT = os.environ.get("BENCH_SWEEP_EXP", "experiments/quick.toml")
SLOTS = 2
ROUNDS = 2


def _timed_sweep(exp) -> float:
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as root:
        t0 = time.perf_counter()
        result = run_sweep(exp, results_root=root, echo=lambda s: None)
        wall_s = time.perf_counter() - t0
    bad = [o for o in result.outcomes if o.status != "ok"]
    if bad:
        raise RuntimeError(f"{bad[0].rel_dir}: {bad[0].status} ({bad[0].reason})")
    return wall_s


def _breakdown(exp) -> dict:
    """The parts of a sweep, each timed alone here."""
    from replay.sweep.prepare import load_trace
    from replay.sweep.ray_node import pack, unpack

    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as root:
        runner = SweepRunner(exp, results_root=root, echo=lambda s: None)
        t0 = time.perf_counter()
        runner.trace = load_trace(exp)
        out["trace_s"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        runner.predict()
        out["predictions_s"] = round(time.perf_counter() - t0, 2)
        runs_s = []
        for p in plan_runs(exp):
            t0 = time.perf_counter()
            runner.run_one(p)
            runs_s.append(time.perf_counter() - t0)
        out["run_s"] = spread(runs_s)
        run_dir = runner.exp_dir / plan_runs(exp)[0].rel_dir
        t0 = time.perf_counter()
        files = pack(run_dir)
        unpack(Path(root) / "home" / "r0", files)
        out["ship_one_run_s"] = round(time.perf_counter() - t0, 3)
        out["ship_one_run_bytes"] = sum(len(b) for b in files.values())
    # what a fresh worker pays once before its first run
    code = "import time; t = time.perf_counter(); import replay.sweep.ray_node; "
    code += "print(time.perf_counter() - t)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    out["worker_first_import_s"] = round(float(done.stdout.strip()), 2)
    return out


def run() -> dict:
    try:
        import ray
    except ImportError:
        line = "ray is not installed: pip install 'replay[ray]' (make setup-ray); skipped"
        print(f"[bench_sweep_ray] {line}")
        return {"skipped": line}
    exp = load_experiment(EXPERIMENT)
    runs = len(exp.points()) * exp.repeats
    load_before = load_avg_1m()
    sequential_s = [_timed_sweep(exp) for _ in range(ROUNDS)]
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
        ray_s = [_timed_sweep(dataclasses.replace(exp, cluster=cluster)) for _ in range(ROUNDS)]
    finally:
        ray.shutdown()
    seq = spread(sequential_s)
    return {
        "experiment": EXPERIMENT,
        "runs": runs,
        "cpus": os.cpu_count(),
        "load_avg_1m": [load_before, load_avg_1m()],
        "sequential_wall_s": seq,
        "ray_local_slots": SLOTS,
        "ray_start_s": round(start_s, 2),
        "ray_sweep_wall_s": [round(s, 2) for s in ray_s],  # first: workers not yet warm
        "speedup": round(seq["median"] / ray_s[0], 2),
        "speedup_warm_workers": round(seq["median"] / ray_s[-1], 2),
        "speedup_with_start": round(seq["median"] / (ray_s[0] + start_s), 2),
        "breakdown": _breakdown(exp),
    }
