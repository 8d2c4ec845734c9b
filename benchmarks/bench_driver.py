"""Driver benchmark: client CPU per call, client overhead, and send drift, ours beside a baseline.

Against a zero-latency server in a separate process (benchmarks/zero_server.py), in one run:
1. CPU per call at pool 64 with ~100K-token prompts (8 calls a task; each keeps its context and
   appends 1K tokens): our transports (raw, aiohttp, httpx; the default also with plain encoding)
   and the baseline written the plain way (one thread per slot, urllib, stdlib json).
   `driver_overhead_ratio` = baseline CPU per call / ours (default transport, incremental), one
   ratio per repetition over BENCH_DRIVER_REPEATS (>= 3) interleaved repetitions; the key holds
   the median (the goal checks use it) and `ratio_spread` its `median [min-max]`.
   Allocator tuning (replay/driver/alloc.py) is on for both, as `replay run` sets it, and so is
   the run's GC policy (`quiet_gc`, `freeze_setup` in replay/driver/run.py) for ours.
2. Client overhead at pool 1 (previous response end -> this response end, p50/p99).
3. Send drift (t_send - t_ready) at pool 1,024 with short prompts and gaps uniform in 0-1 s
   (~2K requests/s), each transport run for a fixed wall time (BENCH_DRIVER_LOOPS=asyncio,uvloop
   adds uvloop rows when uvloop is installed).
4. Send drift on a real open-loop trace: the first 600 s of the Mooncake conversation trace
   (../shared/traces/mooncake) replayed 100x faster (~1,750 requests of ~14K tokens, ~290/s), as
   imported (hash blocks expanded by the replay) and as a token-id trace, in the same repetitions
   as the default transport's short-prompt drift, so that their ratio is measured side by side;
   and, as a control, the same arrivals with 64-token prompts (`schedule_short_prompts`): the
   slice's calls arrive in bursts at 200 instants, and each form's p99 over the control's
   (`p99_over_schedule_short_prompts`) is what the prompts' size adds to what the bursts cost.
Every repetition records the load average: with other processes on the machine, drift measures
the machine as much as the client. The drift runs (3 and 4) pin the zero server to one core and
the client to the others, as `make bench-peers` does (BENCH_DRIVER_PIN=0: neither pinned): left to
the scheduler, the server is often woken onto the client's core, and the write that completes a
request then waits for it to run.

`python -m benchmarks.bench_driver drift` runs only the default transport's drift (3 and 4) in
the same interleaved repetitions and prints it, without touching results/bench.json: for
comparing two versions of the driver side by side.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import json
import os
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

from benchmarks.common import load_avg_1m, pinned_apart, spread
from benchmarks.zero_server import ZeroServer
from replay.driver.alloc import keep_freed_memory
from replay.driver.fine_timer import new_loop
from replay.driver.http import DEFAULT_TRANSPORT, TRANSPORTS
from replay.driver.http_common import HttpOptions
from replay.driver.options import RunOptions
from replay.driver.pool import RunControl, replay
from replay.driver.records import percentile
from replay.driver.run import freeze_setup, quiet_gc
from replay.trace.importers import import_trace
from replay.trace.model import Call, Trace, TraceHeader

CPU_POOL = int(os.environ.get("BENCH_DRIVER_CPU_POOL", 64))
CPU_CALLS_PER_TASK = int(os.environ.get("BENCH_DRIVER_CPU_CALLS", 8))
REPEATS = max(3, int(os.environ.get("BENCH_DRIVER_REPEATS", 3)))
PROMPT_TOKENS = 100_000
DRIFT_POOL = int(os.environ.get("BENCH_DRIVER_DRIFT_POOL", 1024))
DRIFT_SECONDS = float(os.environ.get("BENCH_DRIVER_DRIFT_S", 8.0))
# httpx is far past saturation at 1,024 connections; a short run shows it and saves minutes
DRIFT_SECONDS_HTTPX = float(os.environ.get("BENCH_DRIVER_DRIFT_HTTPX_S", 3.0))
# event loops for the drift runs: "asyncio" (what replay run uses); "uvloop" (if installed) adds
# rows named "<transport>+uvloop", for the comparison in docs/driver.md
DRIFT_LOOPS = os.environ.get("BENCH_DRIVER_LOOPS", "asyncio").split(",")
# drift runs with the zero server on one core and the client on the other (pinned_apart); 0 leaves
# both to the scheduler. `drift` mode's variant "unpinned" runs beside the pinned default.
DRIFT_PIN = os.environ.get("BENCH_DRIVER_PIN", "1") != "0"
MOONCAKE = Path(os.environ.get("BENCH_DRIVER_MOONCAKE", "../shared/traces/mooncake"))
MOONCAKE_FILE = "conversation_trace.jsonl"
MOONCAKE_SPAN_S = float(os.environ.get("BENCH_DRIVER_MOONCAKE_SPAN_S", 600.0))  # first 10 min
MOONCAKE_SPEEDUP = 100.0
CONTROL_FORM = "schedule_short_prompts"  # the Mooncake arrivals with short prompts: no goal
SCHEDULE_PROMPT_TOKENS = 64  # the control form's prompts: the short-prompt pool's first prompt


def _trace(tasks: int, calls: int, first: int, append: int, out: int, gaps, seed: int) -> Trace:
    rng = np.random.default_rng(seed)
    all_calls = []
    for t in range(tasks):
        ctx = 0
        for i in range(calls):
            new = rng.integers(0, 150_000, first if i == 0 else append, dtype=np.int32)
            all_calls.append(
                Call(f"task{t:05d}", i, float(gaps(rng)), ctx, new, ctx + len(new), out)
            )
            ctx += len(new) + out
    return Trace(TraceHeader(vocab_size=150_000), all_calls)


# --- ours ------------------------------------------------------------------------------------


def _ours(
    url: str,
    trace: Trace,
    pool: int,
    name: str,
    incremental: bool,
    duration_s=None,
    loop_name: str = "asyncio",
    gap_scale: float = 1.0,
):
    """Run the real pool; returns (client CPU s, rows, wall s, loop lags)."""
    # "single", "whole" and "plain" are the drift comparisons of `run_drift`: each call sent by
    # its own task (no group sends), then also written whole at its deadline (no last-byte sync),
    # then also on asyncio's own whole-ms timers
    opts = RunOptions(
        pool=pool,
        request_timeout_s=120,
        interrupt_grace_s=0.5,
        gap_scale=gap_scale,
        last_byte_sync=loop_name not in ("whole", "plain"),
    )

    got = []

    async def main() -> None:
        http = HttpOptions(
            url, model="zero", limit=pool, request_timeout_s=120, prewarm_connections=pool
        )
        transport = TRANSPORTS[name](http, incremental=incremental)
        if loop_name == "single":  # staged, but without `fire` the window sends nothing itself
            transport.fire = lambda request: False
        control = RunControl()
        if duration_s is not None:
            start = transport.start

            async def start_then_time() -> None:  # the run's duration counts after prewarm
                await start()
                asyncio.get_running_loop().call_later(duration_s, control.stop)

            transport.start = start_then_time
        # kept out of the task's result: asyncio.run's SIGINT handler restore (Python 3.11)
        # formats the finished task, result included, which costs ~20 us per row of CPU
        got.append(await replay(trace, transport, opts, control=control, on_ready=freeze_setup))

    if loop_name == "uvloop":
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    elif loop_name == "plain":  # asyncio's own selector: timers rounded up to whole ms
        runner = asyncio.Runner(loop_factory=asyncio.new_event_loop)
    elif loop_name == "nospin":  # the fine selector sleeping to each deadline, no poll
        runner = asyncio.Runner(loop_factory=lambda: new_loop(0.0))
    else:  # what `replay run` uses (replay/driver/run.py)
        runner = asyncio.Runner(loop_factory=new_loop)
    with quiet_gc():  # as run_replay does (replay/driver/run.py)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        with runner:
            runner.run(main())
    (result,) = got
    return time.process_time() - cpu0, result.rows, time.perf_counter() - wall0, result.loop_lag_s


# --- baseline: one thread per slot, urllib, stdlib json --------------------------------------


def _baseline(url: str, trace: Trace, pool: int):
    """Returns (client CPU s, per-call overhead s, calls)."""
    roots = iter(trace.root_task_ids)
    lock = threading.Lock()
    overheads: list[float] = []
    errors: list[BaseException] = []

    def slot() -> None:
        while True:
            with lock:
                task = next(roots, None)
            if task is None:
                return
            t_prev = time.perf_counter()
            for step in trace.steps(task):
                body = {
                    "model": "zero", "max_tokens": step.call.output_len,
                    "min_tokens": step.call.output_len, "ignore_eos": True, "temperature": 0,
                    "stream": True, "stream_options": {"include_usage": True}, "user": task,
                    "prompt": step.prompt.tolist(),
                }  # fmt: skip
                req = urllib.request.Request(
                    url + "/v1/completions",
                    data=json.dumps(body).encode(),
                    headers={"Content-Type": "application/json"},
                )
                try:
                    with urllib.request.urlopen(req, timeout=120) as resp:
                        for line in resp:
                            if line.startswith(b"data: ") and line[6:].strip() != b"[DONE]":
                                json.loads(line[6:])
                except Exception as e:  # noqa: BLE001 - reported below
                    errors.append(e)
                    return
                now = time.perf_counter()
                with lock:
                    overheads.append(now - t_prev)
                t_prev = now

    cpu0 = time.process_time()
    threads = [threading.Thread(target=slot) for _ in range(pool)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"baseline client failed: {errors[0]!r}")
    return time.process_time() - cpu0, overheads, len(overheads)


def mooncake_traces(path: Path = MOONCAKE) -> dict[str, Trace] | None:
    """The Mooncake slice as imported (hash blocks) and as a token-id trace of the same prompts;
    None when the shared traces are not on this machine."""
    src = path / MOONCAKE_FILE
    if not src.exists():
        return None
    full = import_trace("mooncake", [src])
    t_first = min(float(c.at_s or 0.0) for c in full.calls)
    keep = [c for c in full.calls if float(c.at_s or 0.0) - t_first < MOONCAKE_SPAN_S]
    blocks = Trace(full.header, keep)
    ids = [dataclasses.replace(c, append=blocks.prompt(c), keep=0, ns=None) for c in blocks.calls]
    header = TraceHeader(vocab_size=full.header.vocab_size, source="mooncake")
    # the control: the same arrivals (bursts included) with short prompts, so that what the
    # prompts' size adds to the drift is told apart from what the schedule's bursts add
    cut = SCHEDULE_PROMPT_TOKENS
    short = [dataclasses.replace(c, append=c.append[:cut], prompt_len=min(c.prompt_len, cut))
             for c in ids]  # fmt: skip
    return {
        "imported": blocks,
        "token_ids": Trace(header, ids),
        CONTROL_FORM: Trace(header, short),
    }


def _drift_stats(rows, secs: float, lags, cpu_s: float, wall_s: float) -> dict:
    d = [r["drift_s"] for r in rows]
    return {
        "p50_ms": _ms(percentile(d, 50)),
        "p99_ms": _ms(percentile(d, 99)),
        "max_ms": _ms(max(d) if d else None),
        "requests": len(rows),
        "requests_per_s": round(len(rows) / secs, 1),
        "seconds": secs,
        "loop_lag_p99_ms": _ms(percentile(lags, 99)),
        # the client's CPU over the run's wall time (set-up included): what the timer's spin
        # (replay/driver/fine_timer.py) and the sends cost
        "client_cpu_fraction": round(cpu_s / wall_s, 3),
        "load_avg_1m": load_avg_1m(),
    }


def _drift_runs() -> list[tuple[str, str]]:
    runs = []
    for loop_name in DRIFT_LOOPS:
        if loop_name == "uvloop" and importlib.util.find_spec("uvloop") is None:
            continue  # optional comparison; not a dependency
        runs += [(loop_name, name) for name in TRANSPORTS]
    return runs


def _ms(v):
    return None if v is None else round(v * 1e3, 3)


def _drift_short(url: str, trace: Trace, loop_name: str, name: str) -> dict:
    secs = DRIFT_SECONDS_HTTPX if name == "httpx" else DRIFT_SECONDS
    cpu, rows, wall, lags = _ours(url, trace, DRIFT_POOL, name, True, secs, loop_name)
    # the run stops after `secs`: calls then in flight end cancelled; any other failure counts
    assert rows and all(r["status"] == "ok" or r["error_kind"] == "cancelled" for r in rows), [
        r for r in rows if r["status"] != "ok" and r["error_kind"] != "cancelled"
    ][:1]
    return _drift_stats(rows, secs, lags, cpu, wall)


def _drift_open(url: str, trace: Trace, loop_name: str = "asyncio") -> dict:
    cpu, rows, wall, lags = _ours(
        url,
        trace,
        DRIFT_POOL,
        DEFAULT_TRANSPORT,
        True,
        loop_name=loop_name,
        gap_scale=1.0 / MOONCAKE_SPEEDUP,
    )
    assert rows and all(r["status"] == "ok" for r in rows), rows[:1]
    return _drift_stats(rows, wall, lags, cpu, wall)


def run() -> dict:
    # as `replay run` does; process-wide, so the baseline measured here gets it too
    keep_freed_memory()
    out: dict = {"default_transport": DEFAULT_TRANSPORT, "cpu_pool": CPU_POOL,
                 "prompt_tokens": PROMPT_TOKENS, "drift_pool": DRIFT_POOL, "repeats": REPEATS,
                 "load_avg_1m_start": load_avg_1m()}  # fmt: skip
    big = _trace(CPU_POOL, CPU_CALLS_PER_TASK, PROMPT_TOKENS, 1000, 16, lambda r: 0.0, 1)
    one = _trace(1, 40, PROMPT_TOKENS, 1000, 16, lambda r: 0.0, 2)
    drift_trace = _trace(DRIFT_POOL, 40, 64, 16, 1, lambda r: r.uniform(0.0, 1.0), 3)
    mooncake = mooncake_traces()
    # plain encoding only for the default transport: enough to show what incremental encoding
    # buys, without doubling the slowest part of the bench
    variants = [(n, True) for n in TRANSPORTS] + [(DEFAULT_TRANSPORT, False)]
    with tempfile.TemporaryDirectory() as tmp, ZeroServer(tmp) as srv:
        # 1 and 4. Repetitions interleave every client (and the drift runs of the default
        # transport), so that a burst of other processes' load hits all of one repetition's
        # figures alike; each ratio is taken within a repetition.
        runs: dict[str, list[float]] = {}
        loads: list[float] = []
        drift_reps: dict[str, list[dict]] = {}
        # untimed warm-up: each transport's module imported (aiohttp's import alone is ~0.25 s
        # of CPU, ~0.5 ms a call of the first repetition) and its first connections made
        warm = _trace(2, 2, PROMPT_TOKENS, 1000, 16, lambda r: 0.0, 4)
        _baseline(srv.url, warm, 2)
        for name in TRANSPORTS:
            _ours(srv.url, warm, 2, name, True)
        for _ in range(REPEATS):
            base_cpu, _, base_calls = _baseline(srv.url, big, CPU_POOL)
            runs.setdefault("baseline", []).append(base_cpu / base_calls)
            for name, incremental in variants:
                c, rows, _, _ = _ours(srv.url, big, CPU_POOL, name, incremental)
                assert all(r["status"] == "ok" for r in rows), rows[0]
                key = f"{name}{'' if incremental else '_plain'}"
                runs.setdefault(key, []).append(c / len(rows))
            forms = [("short", drift_trace)] + list((mooncake or {}).items())
            with pinned_apart(_pid(srv), DRIFT_PIN) as pins:
                for form, trace in forms:
                    drift_reps.setdefault(form, []).append(_drift_form(srv.url, form, trace))
            # at the end: the 1-minute average then covers this repetition, not the one before
            loads.append(load_avg_1m())
        base = runs["baseline"]
        ratios = {k: [b / v for b, v in zip(base, vs, strict=True)] for k, vs in runs.items()}
        out["load_avg_1m_per_repeat"] = loads
        out["cpu_ms_per_call"] = {k: _ms(min(v)) for k, v in runs.items()}
        out["cpu_ms_per_call_median"] = {k: _ms(float(np.median(v))) for k, v in runs.items()}
        out["cpu_ms_per_call_spread"] = {
            k: spread([x * 1e3 for x in v], 3)["text"] for k, v in runs.items()
        }
        out["ratio_spread"] = {
            "driver_overhead_ratio": spread(ratios[DEFAULT_TRANSPORT]),
            "driver_overhead_ratio_plain_encoding": spread(ratios[f"{DEFAULT_TRANSPORT}_plain"]),
            **{f"overhead_ratio_{n}": spread(ratios[n]) for n in TRANSPORTS},
        }
        # the ratio keys hold the medians (before, the least CPU of each side: see docs/driver.md)
        for key, sp in out["ratio_spread"].items():
            out[key] = sp["median"]

        # 2. client overhead at pool 1
        over = {}
        _, b_over, _ = _baseline(srv.url, one, 1)
        over["baseline"] = b_over
        for name in TRANSPORTS:
            _, rows, _, _ = _ours(srv.url, one, 1, name, True)
            over[name] = [r["t_end"] - r["t_ready"] for r in rows]
        out["pool1_overhead_ms"] = {
            k: {"p50": _ms(percentile(v, 50)), "p99": _ms(percentile(v, 99))}
            for k, v in over.items()
        }

        # 3. send drift at pool 1,024, short prompts, gaps uniform 0-1 s: the default transport's
        # repetitions from above (median p99), the others once
        drift = {}
        for loop_name, name in _drift_runs():
            key = name if loop_name == "asyncio" else f"{name}+{loop_name}"
            if key == DEFAULT_TRANSPORT:
                reps = drift_reps["short"]
                drift[key] = {**_median_rep(reps), "p99_ms_spread": _p99_spread(reps)}
            else:
                with pinned_apart(_pid(srv), DRIFT_PIN):
                    drift[key] = _drift_short(srv.url, drift_trace, loop_name, name)
        out["drift_pool1024"] = drift
        out["drift_pinning"] = pins
        out["drift_p99_ms"] = drift[DEFAULT_TRANSPORT]["p99_ms"]
        ratio = out["ratio_spread"]["driver_overhead_ratio"]["median_exact"]
        out["goals"] = {  # on unrounded medians
            "driver_overhead_ratio>=10": ratio >= 10,
            "driver_overhead_ratio>=20": ratio >= 20,
            "drift_p99<5ms": _p99s(drift_reps["short"])["median_exact"] < 5.0,
        }
        if mooncake is None:  # the goals stay unmet, not absent (absent read as all met)
            out["drift_mooncake"] = {"skipped": f"{MOONCAKE / MOONCAKE_FILE} missing"}
            for form in ("imported", "token_ids"):
                out["goals"][f"mooncake_{form}_p99<=2ms"] = None
                out["goals"][f"mooncake_{form}_p99<=1.5x_short"] = None
        else:
            out["drift_mooncake"] = _mooncake_summary(drift_reps, mooncake)
            for form in mooncake:
                if form == CONTROL_FORM:
                    continue  # a control, not one of the trace's forms: no goal of its own
                m = out["drift_mooncake"][form]
                out["goals"][f"mooncake_{form}_p99<=2ms"] = m["p99_ms_median_exact"] <= 2.0
                out["goals"][f"mooncake_{form}_p99<=1.5x_short"] = (
                    m["p99_over_short_median_exact"] <= 1.5
                )
        out["server_cpu_s"] = round(srv.cpu_s(), 2)
        # other processes' load: when it is near or above the core count, drift and loop lag
        # measure the machine, not the client
        out["load_avg_1m_end"] = load_avg_1m()
        out["cores"] = os.cpu_count()
    return out


def _pid(srv: ZeroServer) -> int:
    assert srv.proc is not None
    return srv.proc.pid


def _median_rep(reps: list[dict]) -> dict:
    """The repetition with the median p99 (its other figures kept together with it; the upper
    one of an even count: the goals use `_p99s`'s median)."""
    return sorted(reps, key=lambda d: d["p99_ms"])[len(reps) // 2]


def _p99s(reps: list[dict]) -> dict:
    """The spread of the repetitions' p99 (a repetition without one is refused, not read as 0)."""
    return spread([d["p99_ms"] for d in reps], 3)


def _p99_spread(reps: list[dict]) -> str:
    return _p99s(reps)["text"]


def _mooncake_summary(reps: dict[str, list[dict]], traces: dict[str, Trace]) -> dict:
    """Per trace form: the median repetition, p99's spread, and p99 over the short-prompt p99
    of the same repetition (median [min-max] of that ratio)."""
    short = [d["p99_ms"] for d in reps["short"]]  # > 0: a repetition sent every call
    out: dict = {
        "file": MOONCAKE_FILE,
        "span_s": MOONCAKE_SPAN_S,
        "speedup": MOONCAKE_SPEEDUP,
        "calls": len(next(iter(traces.values()))),
        "mean_prompt_tokens": round(
            next(iter(traces.values())).prompt_tokens / len(next(iter(traces.values())))
        ),
    }
    control = [d["p99_ms"] for d in reps.get(CONTROL_FORM, [])]
    for form in traces:
        over = [d["p99_ms"] / s for d, s in zip(reps[form], short, strict=True)]
        sp = spread(over)
        out[form] = {
            **_median_rep(reps[form]),
            "p99_ms_spread": _p99_spread(reps[form]),
            "p99_ms_median_exact": _p99s(reps[form])["median_exact"],
            "p99_over_short": sp["median"],
            "p99_over_short_spread": sp["text"],
            "p99_over_short_median_exact": sp["median_exact"],
        }
        if control and form != CONTROL_FORM:  # what the prompts add over the schedule alone
            same = spread([d["p99_ms"] / c for d, c in zip(reps[form], control, strict=True)])
            out[form]["p99_over_schedule_short_prompts"] = same["median"]
            out[form]["p99_over_schedule_short_prompts_spread"] = same["text"]
    return out


def _drift_form(url: str, form: str, trace: Trace, loop_name: str = "asyncio") -> dict:
    """One drift run: the short-prompt pool over the default transport, or a Mooncake form open
    loop."""
    if form == "short":
        return _drift_short(url, trace, loop_name, DEFAULT_TRANSPORT)
    return _drift_open(url, trace, loop_name)


def run_drift() -> dict:
    """Only the default transport's drift, short prompts and the Mooncake slice, in interleaved
    repetitions (as in `run`). With `BENCH_DRIVER_LOOPS=asyncio,single,whole,plain` every
    repetition also runs each form the other ways, reported under `loops`: `single` sends each
    call from its own task (the calls due together not sent as one group), `whole` also writes
    each request whole at its deadline (`last_byte_sync` off), `plain` also keeps asyncio's own
    selector (timers in whole ms), `nospin` is the default with the fine selector sleeping to each
    deadline (`timer_spin_s` 0: no polling before it), and `unpinned` is the default with the
    server and the client left to the scheduler (not `pinned_apart`). Side by side, interleaved."""
    keep_freed_memory()
    drift_trace = _trace(DRIFT_POOL, 40, 64, 16, 1, lambda r: r.uniform(0.0, 1.0), 3)
    mooncake = mooncake_traces()
    forms = [("short", drift_trace)] + list((mooncake or {}).items())
    loops = ["asyncio"] + [n for n in DRIFT_LOOPS if n != "asyncio"]
    reps: dict[str, dict[str, list[dict]]] = {n: {} for n in loops}
    out: dict = {"repeats": REPEATS, "load_avg_1m_start": load_avg_1m()}
    with tempfile.TemporaryDirectory() as tmp, ZeroServer(tmp) as srv:
        for _ in range(REPEATS):
            for loop_name in loops:
                pin = DRIFT_PIN and loop_name != "unpinned"
                with pinned_apart(_pid(srv), pin) as pins:
                    for form, trace in forms:
                        got = _drift_form(srv.url, form, trace, loop_name)
                        reps[loop_name].setdefault(form, []).append(got)
                out.setdefault("pinning", {})[loop_name] = pins
    for loop_name in loops:
        lr = reps[loop_name]
        one: dict = {
            "short": {**_median_rep(lr["short"]), "p99_ms_spread": _p99_spread(lr["short"])}
        }
        if mooncake is not None:
            one["drift_mooncake"] = _mooncake_summary(lr, mooncake)
        if loop_name == "asyncio":
            out.update(one)
        else:
            out.setdefault("loops", {})[loop_name] = one
    out["load_avg_1m_end"] = load_avg_1m()
    return out


if __name__ == "__main__":
    drift_only = sys.argv[1:] == ["drift"]
    print(json.dumps(run_drift() if drift_only else run(), indent=2))
