"""Simulator benchmark: a paper-scale replay on the in-process simulator, simulated time beside wall.

`synth --preset swe-agent` (~4,400 calls, ~143-147M prompt tokens), pool 16, through the driver's
agent pool on the virtual-time loop, at six host-tier sizes. Per point: wall seconds, CPU seconds,
simulated makespan, and `sim_speedup_vs_real` = simulated makespan / wall (the baseline is running
the same replay in real time). Each point runs BENCH_SIM_REPEATS (>= 3) times, the repetitions
interleaved over the points; a point's figures are the median [min-max] of its repetitions, and
`sim_speedup_vs_real` is the worst point's median (the goal checks it). `sim_speedup_vs_cpu`
(simulated makespan / CPU seconds) is beside it: on a shared machine wall time also counts other
processes. Goals: >= 1,000x and < 10 s a point, and >= 5,000x simulated seconds per CPU second of
the process (`sim_speedup_vs_cpu` of the worst point: other processes' load does not decide it).

Beside the points, in the same repetitions: the pool's floor, the same replay through a
transport that only sleeps (`SleepTransport`: no engine, no keying), and the speedup that floor
alone would allow at the worst point's makespan (`pool_floor_cap_at_worst_point`). Below 5,000x,
no engine however fast meets the goal there: the pool's own per-call work has to shrink. And the
work floor (`work_floor_cpu_s`): what every call costs whatever runs the simulation, with no
engine, no event loop and no pool, each task's calls one after another: its prompt expanded and
its request built (`replay.driver.outcome.Prompts`), its block keys (`replay.sim.keying`), its
row (`call_row`); `work_floor_cap_at_worst_point` is the speedup that alone allows. Also
renders the explainer figure (session vs block eviction, six sessions) to
results/figures/sim_explainer_eviction.png.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
import time
from pathlib import Path

import orjson

from benchmarks.common import load_avg_1m, spread
from replay.clock import VirtualTimeLoop
from replay.driver.options import RunOptions
from replay.driver.outcome import Prompts, call_row
from replay.driver.pool import replay
from replay.protocol import CompletionRequest, CompletionResult
from replay.sim.keying import TaskKeyer
from replay.sim.options import SimConfig
from replay.sim.transport import SimTransport
from replay.trace.synth import synth

POOL = int(os.environ.get("BENCH_SIM_POOL", 16))
REPEATS = max(3, int(os.environ.get("BENCH_SIM_REPEATS", 3)))
TIERS_GIB = [float(x) for x in os.environ.get("BENCH_SIM_TIERS", "0,2.5,5,10,20,40").split(",")]
CONFIG = SimConfig(hardware="h20", model="qwen3-coder-30b-a3b", tp=8, device_kv_gib=8.0)
FIGURE = Path("results/figures/sim_explainer_eviction.png")
GOAL_PER_CPU = 5000  # simulated seconds per CPU second, every point


def _point(trace, cfg: SimConfig) -> dict:
    sim = SimTransport(cfg, vocab_size=trace.header.vocab_size)
    loop = VirtualTimeLoop()
    w0, c0 = time.perf_counter(), time.process_time()
    try:
        res = loop.run_until_complete(replay(trace, sim, RunOptions(pool=POOL, forcing=True)))
    finally:
        loop.close()
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    # a point that failed calls would be fast for the wrong reason
    assert res.status == "ok" and len(res.rows) == len(trace), (res.status, res.reason)
    makespan = max(r["t_end"] for r in res.rows)
    c = sim.counters()
    return {
        "host_tier_gib": cfg.host_tier_gib,
        "status": res.status,
        "records_sha256": records_digest(res.rows, c),
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "makespan_s": round(makespan, 1),
        "sim_speedup_vs_real": round(makespan / wall, 1),
        "sim_speedup_vs_cpu": round(makespan / cpu, 1),
        "cpu_ms_per_call": round(1000 * cpu / len(res.rows), 3),
        "load_avg_1m": load_avg_1m(),
        "computed_prefill_tokens": c["computed_prefill_tokens"],
        "host_restore_tokens": c["host_restore_tokens"],
        "device_hit_tokens": c["device_hit_tokens"],
        "host_write_tokens": c["host_write_tokens"],
        "preemptions": c["preemptions"],
    }


def records_digest(rows: list[dict], counters: dict) -> str:
    """sha256 of a point's per-call rows (in task, call order, keys sorted) and its counters:
    virtual time makes them a pure function of trace, config and seed, so every repetition of a
    point must give the same digest (tests/test_sim_records_fixed.py holds small traces'
    records to a stored reference across code changes)."""
    ordered = sorted(rows, key=lambda r: (r["task"], r["call"]))
    blob = orjson.dumps([ordered, counters], option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(blob).hexdigest()


class SleepTransport:
    """A transport with no engine: each call sleeps 0.2 s plus 1 us a prompt token of loop time
    and returns the forced output, so a replay through it costs the pool alone."""

    name = "sleep"

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def complete(self, request: CompletionRequest) -> CompletionResult:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await asyncio.sleep(0.2 + len(request.prompt) * 1e-6)
        return CompletionResult(
            t_first_token=t0 + 0.1,
            t_end=loop.time(),
            prompt_tokens=len(request.prompt),
            completion_tokens=int(request.max_tokens),
            output_ids=request.forced_output,
        )


def pool_floor_cpu_s(trace) -> float:
    """CPU seconds of the paper-scale replay through `SleepTransport` (the pool's floor)."""
    loop = VirtualTimeLoop()
    c0 = time.process_time()
    try:
        res = loop.run_until_complete(
            replay(trace, SleepTransport(), RunOptions(pool=POOL, forcing=True))
        )
    finally:
        loop.close()
    assert res.status == "ok" and len(res.rows) == len(trace), res.reason
    return time.process_time() - c0


def work_floor_cpu_s(trace) -> float:
    """CPU seconds of the work each call of the paper-scale replay needs however the simulation
    runs (expansion and request, block keys, row), each task's calls in order: a lower bound,
    since its caches stay warm where a real point interleaves the engine's work."""
    opt = RunOptions(pool=POOL, forcing=True)
    prompts = Prompts(trace, opt)
    keyer = TaskKeyer(CONFIG.block_tokens)
    rows = []
    c0 = time.process_time()
    for task in trace.tasks:
        for call in trace.tasks[task]:
            req = prompts.request(task, call.index)
            keyer.keys(task, req.prompt, req.forced_output)
            t = float(call.index)
            res = CompletionResult(  # the fields SimTransport.complete fills
                t_first_token=t + 0.1,
                t_end=t + 0.2,
                prompt_tokens=len(req.prompt),
                completion_tokens=req.max_tokens,
                cached_tokens=0,
                cached_by_source={"device": 0, "host": 0},
                output_ids=req.forced_output,
                extra={"device_hit_tokens": 0, "host_restore_tokens": 0},
                t_last_token=t + 0.2,
                stream_tokens=req.max_tokens,
            )
            rows.append(call_row(req, 0, 0.0, t, t, t + 0.2, res, None, strict=False)[0])
    cpu = time.process_time() - c0
    assert len(rows) == len(trace) and all(r["status"] == "ok" for r in rows)
    return cpu


def _summary(reps: list[dict]) -> dict:
    """One point over its repetitions: the simulated figures (equal in every repetition: same
    seed) and the timings' median, with `median [min-max]` of the speedups and the load."""
    out = dict(reps[0])
    out["records_identical"] = len({r["records_sha256"] for r in reps}) == 1
    for key in ("wall_s", "cpu_s", "cpu_ms_per_call", "sim_speedup_vs_real", "sim_speedup_vs_cpu"):
        sp = spread([r[key] for r in reps], 1 if key.startswith("sim_") else 3)
        out[key] = sp["median"]
        if key.startswith("sim_"):
            out[f"{key}_spread"] = sp["text"]
    out["load_avg_1m"] = [r["load_avg_1m"] for r in reps]
    return out


def explainer_figure(path: Path = FIGURE) -> Path:
    """Device hit rate per turn, six 88K sessions, session vs block eviction (one figure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from replay.sim.scenarios import EXPLAINER_CONFIG, explainer_trace, round_robin

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for n, style in ((5, ":"), (6, "-")):
        trace = explainer_trace(n)
        for mode, color in (("block", "tab:blue"), ("session", "tab:red")):
            rows = round_robin(trace, EXPLAINER_CONFIG, device_eviction=mode)
            turns = sorted({r["turn"] for r in rows})
            rate = [
                sum(r["device_hit_tokens"] for r in rows if r["turn"] == t)
                / sum(r["prompt_tokens"] for r in rows if r["turn"] == t)
                for t in turns
            ]
            ax.plot(
                turns,
                rate,
                style,
                color=color,
                marker="o",
                ms=3,
                label=f"{n} sessions, {mode} eviction",
            )
    ax.set_xlabel("turn (every session takes one call per turn)")
    ax.set_ylabel("device hit rate")
    ax.set_title("Llama-3-70B, 180 GB KV, 88K-token sessions", fontsize=10)
    ax.set_ylim(-0.03, 1.03)
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def goal_line(calls: int, prompt_tokens: int, points: list[dict]) -> str:
    """The 5,000x check on the paper-scale point, one line per run: every host-tier size must
    reach it per CPU second (CPU, not wall: on a shared machine wall time counts other jobs)."""
    worst = min(points, key=lambda p: p["sim_speedup_vs_cpu"])
    per_tier = ", ".join(
        f"{p['host_tier_gib']:g} GiB {p['sim_speedup_vs_cpu']:,.0f}x" for p in points
    )
    met = "met" if worst["sim_speedup_vs_cpu"] >= GOAL_PER_CPU else "NOT met"
    return (
        f"sim goal >= {GOAL_PER_CPU:,}x simulated s per CPU s on the paper-scale point "
        f"({calls:,} calls, {prompt_tokens / 1e6:.0f}M prompt tokens, pool {POOL}): {met}; "
        f"worst {worst['sim_speedup_vs_cpu']:,.0f}x at {worst['host_tier_gib']:g} GiB "
        f"({worst['cpu_ms_per_call']:.3f} ms CPU a call); {per_tier}"
    )


def run() -> dict:
    t0 = time.perf_counter()
    trace = synth("swe-agent", seed=0)
    synth_s = time.perf_counter() - t0
    reps: list[list[dict]] = [[] for _ in TIERS_GIB]
    floors: list[float] = []
    work_floors: list[float] = []
    # untimed warm-up: the simulator's compiled kernels loaded (the first point paid ~0.6 s of
    # CPU for them, compiled ~7 s on a fresh checkout) before any repetition is timed
    warm = synth("swe-agent", tasks=4, seed=1, scale=0.05, max_calls_per_task=6)
    _point(warm, dataclasses.replace(CONFIG, host_tier_gib=max(TIERS_GIB)))
    for _ in range(REPEATS):
        for i, g in enumerate(TIERS_GIB):
            reps[i].append(_point(trace, dataclasses.replace(CONFIG, host_tier_gib=g)))
        floors.append(pool_floor_cpu_s(trace))
        work_floors.append(work_floor_cpu_s(trace))
    points = [_summary(r) for r in reps]
    identical = all(p["records_identical"] for p in points)
    worst = min(points, key=lambda p: p["sim_speedup_vs_real"])
    worst_cpu = min(points, key=lambda p: p["sim_speedup_vs_cpu"])
    floor = spread(floors, 3)
    cap = worst_cpu["makespan_s"] / floor["median"]
    work_floor = spread(work_floors, 3)
    work_cap = worst_cpu["makespan_s"] / work_floor["median"]
    fig = explainer_figure()
    print(goal_line(len(trace), trace.prompt_tokens, points), flush=True)
    print(
        f"pool floor (a transport that only sleeps): {floor['text']} CPU s; at the worst point's "
        f"makespan ({worst_cpu['makespan_s']:,.0f} s) that alone allows {cap:,.0f}x",
        flush=True,
    )
    print(
        f"work floor (expansion, keys and rows, no engine, loop or pool): {work_floor['text']} "
        f"CPU s; that alone allows {work_cap:,.0f}x at the worst point",
        flush=True,
    )
    return {
        "trace": {"calls": len(trace), "prompt_tokens": trace.prompt_tokens, "synth_s": synth_s},
        "pool": POOL,
        "repeats": REPEATS,
        "config": {k: v for k, v in CONFIG.to_dict().items() if k != "host_tier_gib"},
        "points": points,
        "sim_speedup_vs_real": worst["sim_speedup_vs_real"],
        "sim_speedup_vs_real_spread": worst["sim_speedup_vs_real_spread"],
        "sim_speedup_vs_cpu": worst_cpu["sim_speedup_vs_cpu"],
        "sim_speedup_vs_cpu_spread": worst_cpu["sim_speedup_vs_cpu_spread"],
        "sim_speedup_vs_real_median": sorted(p["sim_speedup_vs_real"] for p in points)[
            len(points) // 2
        ],
        "max_wall_s_per_point": max(p["wall_s"] for p in points),
        "pool_floor_cpu_s": floor["median"],
        "pool_floor_cpu_s_spread": floor["text"],
        "pool_floor_cap_at_worst_point": round(cap, 1),
        "work_floor_cpu_s": work_floor["median"],
        "work_floor_cpu_s_spread": work_floor["text"],
        "work_floor_cap_at_worst_point": round(work_cap, 1),
        "goal_speedup": 1000,
        "records_identical_across_repeats": identical,
        "goals": {
            "sim_speedup_vs_real>=1000": worst["sim_speedup_vs_real"] >= 1000,
            "sim_speedup_vs_real>=5000": worst["sim_speedup_vs_real"] >= GOAL_PER_CPU,
            "sim_speedup_vs_cpu>=5000": worst_cpu["sim_speedup_vs_cpu"] >= GOAL_PER_CPU,
            "max_wall_s_per_point<10": max(p["wall_s"] for p in points) < 10,
            "records_identical_across_repeats": identical,
        },
        "goal_wall_s_per_point": 10,
        "goal_speedup_per_cpu": GOAL_PER_CPU,
        "explainer_figure": str(fig),
    }


if __name__ == "__main__":
    print(orjson.dumps(run(), option=orjson.OPT_INDENT_2).decode())
