"""replay beside AIPerf 0.13 against the same zero-latency server: `make bench-peers`.

One run, one server (benchmarks/zero_server.py, pinned to one core; the clients get the other
cores), each client run as its own command line with its whole process tree's CPU measured
(benchmarks/proc_tree.py):
1. CPU per request and achieved rate at 64 in flight with 100K-token prompts: 64 tasks of
   BENCH_PEERS_CALLS calls (the first prompt 100K tokens, each next call keeps the context and
   appends 1K; `make bench`'s CPU workload, with 4 calls a task where it has 8), `replay run
   --pool 64` on the trace,
   AIPerf with `--concurrency 64` on the same bodies as verbatim payload rows.
2. Schedule lateness (send minus scheduled time, p50/p99) on the Mooncake conversation slice of
   `make bench` (first 600 s, 100x faster, as a token-id trace): `replay run --gap-scale 0.01`
   open loop, AIPerf on its fixed schedule with the same timestamps divided by 100.
Both are whole-client figures: start-up, loading the input and writing results are included, as
a user pays them. Both keep a parsed copy of their input between runs (AIPerf its dataset mmap
cache, replay its parsed-trace cache), both in this run's temporary folder: each side's first
run of each input, which fills its cache, is reported apart, and the repetitions run warm. A run
with a failed request stops the bench (a failed request costs little CPU and would count). Writes
results/bench-peers.json. Needs AIPerf in .venv-aiperf (the Makefile installs it); not part of
`make bench` or CI.
"""

from __future__ import annotations

import compileall
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

import replay
from benchmarks.bench_driver import (
    MOONCAKE,
    MOONCAKE_FILE,
    MOONCAKE_SPAN_S,
    MOONCAKE_SPEEDUP,
    _trace,
    mooncake_traces,
)
from benchmarks.common import load_avg_1m, split_cores, spread
from benchmarks.peers_aiperf import (
    AIPERF_VERSION,
    TOKENIZER_REPO,
    command,
    lateness_s,
    rate_per_s,
    read_export,
    write_rows,
)
from benchmarks.proc_tree import run_measured
from benchmarks.zero_server import ZeroServer
from replay import __version__ as replay_version
from replay.driver.records import percentile
from replay.trace.io import write_trace
from replay.trace.model import Trace

PEERS_JSON = Path("results/bench-peers.json")
AIPERF_VENV = Path(os.environ.get("BENCH_PEERS_AIPERF_VENV", ".venv-aiperf"))
POOL = 64
CALLS_PER_TASK = int(os.environ.get("BENCH_PEERS_CALLS", 4))
REPEATS = max(3, int(os.environ.get("BENCH_PEERS_REPEATS", 3)))  # a median needs 3
REPLAY = str(Path(sys.executable).with_name("replay"))
# Niceness of the server and both clients (negative needs root). On a shared machine other
# processes take CPU from a one-process client (replay) more than from a client of nine
# processes (AIPerf), which the scheduler gives nine shares; a negative value keeps both apart
# from that load alike. Recorded in the results.
NICE = int(os.environ.get("BENCH_PEERS_NICE", 0))


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1e3, 3)


def _usage(why: str) -> None:
    """A set-up the bench cannot use: one line, exit 2."""
    print(f"bench-peers: {why}", file=sys.stderr)
    raise SystemExit(2)


def _stop(what: str, why: str, log: Path) -> None:
    """Stop with the end of the client's output: its directory is temporary."""
    tail = log.read_text(errors="replace").splitlines()[-15:] if log.exists() else []
    raise SystemExit(f"bench-peers: {what} {why}; its last lines:\n" + "\n".join(tail))


def _failed(what: str, rc: int, log: Path) -> None:
    _stop(what, f"exited {rc}", log)


def _all_served(what: str, m: dict, expected: int, log: Path) -> None:
    """Every request answered ok, or the run stops: a failed request costs the client little, so
    counting it would lower the CPU per request and move the ratio (both exit 0 on them)."""
    if m["errors"] or m["requests"] != expected:
        _stop(f"{what}:", f"{m['requests'] - m['errors']} of {expected} requests served ok", log)


def _replay(url: str, trace_file: Path, out: Path, cpus, env, *, pool: int,
            gap_scale: float, expected: int) -> dict:  # fmt: skip
    argv = [REPLAY, "run", "--trace", str(trace_file), "--pool", str(pool), "--out", str(out),
            "--url", url, "--served-model", "zero", "--json", "--quiet",
            "--gap-scale", repr(gap_scale)]  # fmt: skip
    m = run_measured(argv, env=env, cpus=cpus, nice=NICE, log=out.with_suffix(".log"))
    if m["rc"] != 0:
        _failed("replay run", m["rc"], out.with_suffix(".log"))
    rows = [orjson.loads(line) for line in (out / "calls.jsonl").read_bytes().splitlines()]
    bad = [r for r in rows if r["status"] != "ok"]
    summary = orjson.loads((out / "run.json").read_bytes())["summary"]
    # the CPU of the run itself (its clock's span), the rest being start-up, reading the trace
    # and writing the results: replay's own measure, for the split in docs/driver.md
    m["cpu_in_run_s"] = summary["client_cpu_fraction"] * summary["makespan_s"]
    m.update(requests=len(rows), errors=len(bad),
             starts=[r["t_send"] for r in rows], ends=[r["t_end"] for r in rows],
             lateness=[r["drift_s"] for r in rows])  # fmt: skip
    _all_served("replay run", m, expected, out.with_suffix(".log"))
    return m


def _aiperf(url: str, rows: Path, art: Path, cpus, env, *, requests: int, concurrency=None,
            offsets=None) -> dict:  # fmt: skip
    argv = command(
        str(AIPERF_VENV / "bin" / "aiperf"), url, rows, art, concurrency=concurrency,
        requests=requests, fixed_schedule=offsets is not None,
    )  # fmt: skip
    m = run_measured(argv, env=env, cpus=cpus, nice=NICE, log=art.with_suffix(".log"))
    if m["rc"] != 0:
        _failed("aiperf profile", m["rc"], art.with_suffix(".log"))
    records, start_ns = read_export(art)
    m.update(requests=len(records), errors=sum(r["error"] is not None for r in records),
             starts=[r["start_ns"] / 1e9 for r in records],
             ends=[r["end_ns"] / 1e9 for r in records])  # fmt: skip
    _all_served("aiperf profile", m, requests, art.with_suffix(".log"))
    if offsets is not None:
        m["lateness"] = lateness_s(records, start_ns, offsets)
        own = orjson.loads((art / "profile_export_aiperf.json").read_bytes())
        m["own_lag_ms"] = {  # AIPerf's figures, anchored at its least-late request
            k: (own.get(f"replay_sched_lag_{k}") or {}).get("avg") for k in ("p50", "p99")
        }
    return m


def _cpu_summary(m: dict) -> dict:
    return {
        "requests": m["requests"], "errors": m["errors"], "processes": m["processes"],
        "cpu_s": round(m["cpu_s"], 3), "cpu_ms_per_request": _ms(m["cpu_s"] / m["requests"]),
        "wall_s": round(m["wall_s"], 2),
        "requests_per_s": round(rate_per_s(m["starts"], m["ends"]), 1),
        **({"cpu_in_run_s": round(m["cpu_in_run_s"], 3)} if "cpu_in_run_s" in m else {}),
    }  # fmt: skip


def _late_summary(m: dict) -> dict:
    late = m["lateness"]
    out = {
        "requests": m["requests"], "errors": m["errors"], "cpu_s": round(m["cpu_s"], 3),
        "lateness_p50_ms": _ms(percentile(late, 50)), "lateness_p99_ms": _ms(percentile(late, 99)),
        "lateness_max_ms": _ms(max(late)),
        "requests_per_s": round(rate_per_s(m["starts"], m["ends"]), 1),
    }  # fmt: skip
    if "own_lag_ms" in m:
        out["aiperf_own_lag_ms"] = m["own_lag_ms"]
    return out


def _cpu_order(trace: Trace) -> list[int]:
    """AIPerf takes rows in file order: every task's first call, then every second call, ...,
    the order in which replay's 64 slots reach them."""
    return sorted(range(len(trace.calls)), key=lambda i: (trace.calls[i].index, i))


def _versions(env: dict) -> dict:
    aiperf_python = str(AIPERF_VENV / "bin" / "python")
    got = subprocess.run(
        [aiperf_python, "-c", "import importlib.metadata as m; print(m.version('aiperf'))"],
        capture_output=True, text=True, env=env, check=True,
    ).stdout.strip()  # fmt: skip
    if got != AIPERF_VERSION:
        _usage(f"{AIPERF_VENV}: aiperf {got}, expected {AIPERF_VERSION}: remove it and rerun")
    return {"aiperf": got, "replay": replay_version, "python": platform.python_version()}


def run() -> dict:
    if not (AIPERF_VENV / "bin" / "aiperf").exists():
        _usage(f"{AIPERF_VENV}/bin/aiperf: missing: run `make bench-peers`, which installs it")
    # An installed package carries its compiled bytecode (pip writes it, as it did for AIPerf
    # in .venv-aiperf); this checkout's editable replay gets it on its first import, unless
    # PYTHONDONTWRITEBYTECODE is set, when every run would compile ~70 modules (~0.1 s of CPU)
    # that no installed copy compiles. Compiled here once, as pip would.
    compileall.compile_dir(Path(replay.__file__).parent, quiet=1)
    server_cpus, client_cpus = split_cores()
    out: dict = {"load_avg_1m_start": load_avg_1m(), "cores": os.cpu_count(),
                 "server_cpus": sorted(server_cpus), "client_cpus": sorted(client_cpus),
                 "nice": NICE, "repeats": REPEATS,
                 "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp_name:
        tmp = Path(tmp_name)
        env = {**os.environ, "HF_HOME": str(tmp / "hf"), "HF_HUB_OFFLINE": "1",
               "AIPERF_DATASET_MMAP_CACHE_DIR": str(tmp / "aiperf-cache"),
               "REPLAY_TRACE_CACHE": str(tmp / "replay-cache")}  # fmt: skip
        out["versions"] = _versions(env)
        subprocess.run(
            [str(AIPERF_VENV / "bin" / "python"), str(Path(__file__).with_name("peers_tokenizer.py")),
             str(tmp / "hf"), TOKENIZER_REPO], env=env, check=True, capture_output=True,
        )  # fmt: skip
        big = _trace(POOL, CALLS_PER_TASK, 100_000, 1000, 16, lambda r: 0.0, 1)
        write_trace(big, tmp / "cpu.jsonl.gz")
        write_rows(big, tmp / "cpu-rows.jsonl", "zero", order=_cpu_order(big))
        slice_ = (mooncake_traces() or {}).get("token_ids")
        offsets = None
        if slice_ is not None:
            write_trace(slice_, tmp / "mooncake.jsonl.gz")
            offsets = write_rows(slice_, tmp / "mooncake-rows.jsonl", "zero",
                                 speedup=MOONCAKE_SPEEDUP)  # fmt: skip
        cpu: dict[str, list[dict]] = {"replay": [], "aiperf": []}
        late: dict[str, list[dict]] = {"replay": [], "aiperf": []}
        with ZeroServer(tmp) as srv:
            assert srv.proc is not None
            os.sched_setaffinity(srv.proc.pid, server_cpus)
            if NICE:
                os.setpriority(os.PRIO_PROCESS, srv.proc.pid, NICE)
            # AIPerf keeps a parsed copy of each input file (its dataset mmap cache, by default
            # under ~/.cache) and skips parsing on a rerun; so does replay (its parsed-trace
            # cache, by default under ~/.cache/replay/traces). Both caches are in `tmp`, so the
            # first run of each fills its own and is reported apart; the repetitions run warm.
            cold = _cpu_summary(_aiperf(
                srv.url, tmp / "cpu-rows.jsonl", tmp / "aiperf-cpu-cold", client_cpus, env,
                requests=len(big.calls), concurrency=POOL))  # fmt: skip
            replay_cold = _cpu_summary(_replay(
                srv.url, tmp / "cpu.jsonl.gz", tmp / "replay-cpu-cold", client_cpus, env,
                pool=POOL, gap_scale=1.0, expected=len(big.calls)))  # fmt: skip
            late_cold: dict[str, dict] = {}
            if slice_ is not None:  # the lateness inputs' caches filled apart too
                late_cold["replay"] = _late_summary(_replay(
                    srv.url, tmp / "mooncake.jsonl.gz", tmp / "replay-late-cold", client_cpus,
                    env, pool=1024, gap_scale=1.0 / MOONCAKE_SPEEDUP,
                    expected=len(slice_.calls)))  # fmt: skip
                late_cold["aiperf"] = _late_summary(_aiperf(
                    srv.url, tmp / "mooncake-rows.jsonl", tmp / "aiperf-late-cold", client_cpus,
                    env, requests=len(slice_.calls), offsets=offsets))  # fmt: skip
            for rep in range(REPEATS):  # interleaved: a burst of other load hits both sides
                cpu["replay"].append(_cpu_summary(_replay(
                    srv.url, tmp / "cpu.jsonl.gz", tmp / f"replay-cpu-{rep}", client_cpus, env,
                    pool=POOL, gap_scale=1.0, expected=len(big.calls))))  # fmt: skip
                cpu["aiperf"].append(_cpu_summary(_aiperf(
                    srv.url, tmp / "cpu-rows.jsonl", tmp / f"aiperf-cpu-{rep}", client_cpus, env,
                    requests=len(big.calls), concurrency=POOL)))  # fmt: skip
                if slice_ is None:
                    continue
                late["replay"].append(_late_summary(_replay(
                    srv.url, tmp / "mooncake.jsonl.gz", tmp / f"replay-late-{rep}", client_cpus,
                    env, pool=1024, gap_scale=1.0 / MOONCAKE_SPEEDUP,
                    expected=len(slice_.calls))))  # fmt: skip
                late["aiperf"].append(_late_summary(_aiperf(
                    srv.url, tmp / "mooncake-rows.jsonl", tmp / f"aiperf-late-{rep}",
                    client_cpus, env, requests=len(slice_.calls), offsets=offsets)))  # fmt: skip
            out["server_cpu_s"] = round(srv.cpu_s(), 2)
    out.update(summarize(cpu, late, len(big.calls), slice_))
    out["cpu_aiperf_cold_cache"] = cold
    out["cpu_replay_cold_cache"] = replay_cold
    if late_cold:
        out["lateness_cold_cache"] = late_cold
    replay_ms = spread([r["cpu_ms_per_request"] for r in cpu["replay"]], 3)["median"]
    # (this figure's meaning is kept from before replay had a cache: AIPerf cold over replay's
    # usual, now warm, runs; the cold-over-cold ratio is the one beside it)
    out["aiperf_cold_over_replay_cpu_per_request"] = round(
        cold["cpu_ms_per_request"] / replay_ms, 2
    )
    out["aiperf_cold_over_replay_cold_cpu_per_request"] = round(
        cold["cpu_ms_per_request"] / replay_cold["cpu_ms_per_request"], 2
    )
    out["load_avg_1m_end"] = load_avg_1m()
    return out


def summarize(cpu: dict, late: dict, cpu_requests: int, slice_: Trace | None) -> dict:
    """Per-repetition figures, the median ratio and the goal checks."""
    ratios = [a["cpu_ms_per_request"] / r["cpu_ms_per_request"]
              for r, a in zip(cpu["replay"], cpu["aiperf"], strict=True)]  # fmt: skip
    ratio = spread(ratios)
    out: dict = {
        "cpu_workload": {
            "in_flight": POOL,
            "calls_per_task": CALLS_PER_TASK,
            "requests": cpu_requests,
            "first_prompt_tokens": 100_000,
            "appended_tokens": 1000,
        },  # fmt: skip
        "cpu": cpu,
        "aiperf_over_replay_cpu_per_request": ratio["median"],
        "aiperf_over_replay_cpu_spread": ratio["text"],
        "goals": {"aiperf_over_replay_cpu>=5x": ratio["median_exact"] >= 5},
    }
    if slice_ is None:  # unmet, not absent (absent read as met)
        out["mooncake"] = {"skipped": f"{MOONCAKE / MOONCAKE_FILE} missing"}
        out["goals"]["replay_lateness_p99<=aiperf"] = None
    else:
        p99 = {k: spread([d["lateness_p99_ms"] for d in v], 3) for k, v in late.items()}
        out["mooncake"] = {"form": "token_ids", "span_s": MOONCAKE_SPAN_S, "speedup": MOONCAKE_SPEEDUP,
                           "requests": len(slice_.calls), **late}  # fmt: skip
        out["lateness_p99_ms"] = {k: v["median"] for k, v in p99.items()}
        out["lateness_p99_ms_spread"] = {k: v["text"] for k, v in p99.items()}
        out["goals"]["replay_lateness_p99<=aiperf"] = (
            p99["replay"]["median_exact"] <= p99["aiperf"]["median_exact"]
        )
    return out


def main() -> int:
    values = run()
    PEERS_JSON.parent.mkdir(parents=True, exist_ok=True)
    tmp = PEERS_JSON.with_suffix(".json.tmp")
    tmp.write_bytes(orjson.dumps(values, option=orjson.OPT_INDENT_2))
    os.replace(tmp, PEERS_JSON)
    print(json.dumps({k: v for k, v in values.items() if k not in ("cpu", "mooncake")}, indent=2))
    print(f"written: {PEERS_JSON}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
