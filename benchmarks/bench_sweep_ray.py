"""Sweep benchmark: the quick sweep's wall time run one after another here, beside the same sweep
as Ray tasks on a private local Ray with two slots (`replay sweep experiments/quick.toml --ray
local`, `[cluster] local_cpus = 2`). The two are interleaved, round after round, so a change in
the machine's load hits both; medians are reported with the load average. Each round starts a
fresh Ray: its first sweep meets workers that have not imported the harness yet, its second
reuses them. Ray's start-up is timed apart from the sweeps, since a cluster is started once and
then runs many sweeps. What a user pays for one sweep is measured too, in the same rounds: the
command `replay sweep FILE` and `replay sweep FILE --ray local` each in a fresh process
(interpreter, imports, Ray's start and stop, the sweep), wall and CPU of the whole process tree.

CPU time is measured beside the wall time, as it depends less on the load: this process (the
head), Ray's worker processes (the runs, the predictions) and Ray's own daemons (raylet, GCS),
from /proc. Where the time goes is measured too: the predictions (a task on Ray), one run, a
worker's first import of the harness, and shipping a run directory home. Skipped, with a line
saying so, when the `ray` extra is not installed (make setup-ray)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from statistics import median

from benchmarks.common import load_avg_1m, spread
from benchmarks.proc_tree import _tree_sample, run_measured
from replay.sweep.config import load_experiment
from replay.sweep.plan import plan_runs
from replay.sweep.ray_backend import start_local
from replay.sweep.runner import SweepRunner, run_sweep

EXPERIMENT = os.environ.get("BENCH_SWEEP_EXP", "experiments/quick.toml")
SLOTS = 2
ROUNDS = max(3, int(os.environ.get("BENCH_SWEEP_ROUNDS", "3")))  # a median needs 3
_SAMPLE_EVERY_S = 0.25


def _is_worker(cmdline: bytes) -> bool:
    """A Ray worker process: `default_worker.py` until Ray renames it to its task's name
    (`ray::IDLE`, `ray::node_task`); the node's agents are named too."""
    if cmdline.startswith(b"ray::"):
        return not cmdline.split(b"\0")[0].rstrip().endswith(b"Agent")
    return b"default_worker.py" in cmdline


class _CpuWatch:
    """CPU seconds spent during a `with` block by this process and by the processes under it,
    split into Ray workers and Ray's daemons. The tree is sampled in a thread, so a process that
    ends within the block (a worker Ray lets go) still counts, less at most one interval."""

    def __init__(self) -> None:
        self.seen: dict[int, float] = {}
        self.kinds: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self) -> None:
        _tree_sample(os.getpid(), self.seen)
        for pid in self.seen.keys() - self.kinds.keys():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                cmd = b""
            self.kinds[pid] = "workers" if _is_worker(cmd) else "ray_daemons"

    def _loop(self) -> None:
        while not self._stop.wait(_SAMPLE_EVERY_S):
            self._sample()

    def __enter__(self) -> _CpuWatch:
        self._sample()
        self.before = dict(self.seen)
        self.head0 = time.process_time()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.head_s = time.process_time() - self.head0
        self._stop.set()
        self._thread.join()
        self._sample()

    def split(self) -> dict[str, float]:
        out = {"head": self.head_s, "workers": 0.0, "ray_daemons": 0.0}
        for pid, cpu_s in self.seen.items():
            if pid != os.getpid():
                out[self.kinds[pid]] += cpu_s - self.before.get(pid, 0.0)
        return out


def _timed_sweep(exp) -> dict[str, float]:
    """One sweep into a scratch directory: its wall time and CPU split."""
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as root, _CpuWatch() as cpu:
        t0 = time.perf_counter()
        result = run_sweep(exp, results_root=root, echo=lambda s: None)
        wall_s = time.perf_counter() - t0
    bad = [o for o in result.outcomes if o.status != "ok"]
    if bad:
        raise RuntimeError(f"{bad[0].rel_dir}: {bad[0].status} ({bad[0].reason})")
    return {"wall": wall_s, **cpu.split()}


def _command_file(root: Path) -> Path:
    """The experiment with `[cluster] local_cpus` set to the slots, so `--ray local` starts the
    same two-slot Ray on any machine."""
    text = Path(EXPERIMENT).read_text()
    if "[cluster]" not in text:
        text += f"\n[cluster]\nlocal_cpus = {SLOTS}\n"
    path = root / Path(EXPERIMENT).name
    path.write_text(text)
    return path


def _fresh_command(toml: Path, *extra: str) -> dict[str, float]:
    """`replay sweep FILE [extra]` in a fresh process, as a user runs it: wall and CPU seconds
    of the whole process tree (Ray's daemons and workers included)."""
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as root:
        args = ["replay", "sweep", str(toml), "--results", root, *extra]
        code = f"import sys; from replay.cli.main import main; sys.argv = {args!r}; main()"
        done = run_measured([sys.executable, "-c", code], log=Path(root) / "log.txt")
        if done["rc"] != 0:
            tail = (Path(root) / "log.txt").read_text()[-500:]
            raise RuntimeError(f"replay sweep {' '.join(extra)}: exit {done['rc']}: {tail}")
    return {"wall": done["wall_s"], "cpu": done["cpu_s"]}


def _medians(sweeps: list[dict[str, float]]) -> dict[str, float]:
    """The CPU split's medians, key by key."""
    return {k: round(median(s[k] for s in sweeps), 2) for k in ("head", "workers", "ray_daemons")}


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
    code = "import time; t, c = time.perf_counter(), time.process_time(); "
    code += "import replay.sweep.ray_node; "
    code += "print(time.perf_counter() - t, time.process_time() - c)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    wall_s, cpu_s = (float(v) for v in done.stdout.split())
    out["worker_first_import_s"] = round(wall_s, 2)
    out["worker_first_import_cpu_s"] = round(cpu_s, 2)
    return out


def run() -> dict:
    try:
        import ray
    except ImportError:
        from replay.sweep.ray_backend import INSTALL_HINT

        line = f"ray is not installed: {INSTALL_HINT}; skipped"
        print(f"[bench_sweep_ray] {line}")
        return {"skipped": line}
    exp = load_experiment(EXPERIMENT)
    cluster = dataclasses.replace(exp.cluster, backend="ray", address="local")
    on_ray = dataclasses.replace(exp, cluster=cluster)
    runs = len(exp.points()) * exp.repeats
    load_before = load_avg_1m()
    sequential, fresh, warm, start_s, loads = [], [], [], [], []
    commands: dict[str, list[dict[str, float]]] = {"sequential": [], "ray_local": []}
    scratch = tempfile.TemporaryDirectory(prefix="bench-sweep-")
    toml = _command_file(Path(scratch.name))
    for _ in range(ROUNDS):
        commands["sequential"].append(_fresh_command(toml))
        commands["ray_local"].append(_fresh_command(toml, "--ray", "local"))
        sequential.append(_timed_sweep(exp))
        t0 = time.perf_counter()
        start_local(ray, SLOTS)  # what `--ray local` starts, timed apart
        start_s.append(time.perf_counter() - t0)
        try:
            fresh.append(_timed_sweep(on_ray))
            warm.append(_timed_sweep(on_ray))
        finally:
            ray.shutdown()
        loads.append(load_avg_1m())
    scratch.cleanup()
    command_wall = {k: spread([c["wall"] for c in v]) for k, v in commands.items()}
    seq = spread([s["wall"] for s in sequential])
    fresh_s = spread([s["wall"] for s in fresh])
    warm_s = spread([s["wall"] for s in warm])
    start = spread(start_s)
    per_round = spread([q["wall"] / f["wall"] for q, f in zip(sequential, fresh, strict=True)])
    per_round_warm = spread([q["wall"] / w["wall"] for q, w in zip(sequential, warm, strict=True)])
    return {
        "experiment": EXPERIMENT,
        "runs": runs,
        "cpus": os.cpu_count(),
        "rounds": ROUNDS,
        "load_avg_1m": [load_before, load_avg_1m()],
        "load_avg_1m_per_round": loads,
        "sequential_wall_s": seq,
        "ray_local_slots": SLOTS,
        "ray_start_s": start["median"],
        "ray_fresh_wall_s": fresh_s,
        "ray_warm_wall_s": warm_s,
        # medians: first with workers not yet warm, then with warm ones
        "ray_sweep_wall_s": [fresh_s["median"], warm_s["median"]],
        # per-round ratios (each round runs both sides), median [min-max]
        "speedup": per_round["median"],
        "speedup_spread": per_round["text"],
        "speedup_warm_workers": per_round_warm["median"],
        "speedup_warm_workers_spread": per_round_warm["text"],
        "speedup_with_start": round(seq["median"] / (fresh_s["median"] + start["median"]), 2),
        # CPU seconds per sweep (medians): the head, Ray's workers, Ray's daemons
        "cpu_s": {
            "sequential": _medians(sequential),
            "ray_fresh": _medians(fresh),
            "ray_warm": _medians(warm),
        },
        # what a user pays: the command in a fresh process, Ray's start and stop included
        "command_wall_s": command_wall,
        "command_cpu_s": {k: round(median(c["cpu"] for c in v), 2) for k, v in commands.items()},
        "speedup_command": round(
            command_wall["sequential"]["median"] / command_wall["ray_local"]["median"], 2
        ),
        "breakdown": _breakdown(exp),
    }
