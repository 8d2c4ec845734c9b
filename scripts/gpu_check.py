"""`make gpu-check`: does replay work against the real engines on this GPU box? About 10 minutes on
one GPU, no model download: the project's tiny Llama (config and tokenizer written locally,
random weights from `load_format dummy`).

One sweep point each: vLLM with the device tier only, vLLM with native CPU offloading, vLLM +
LMCache, SGLang + HiCache, each from its `make setup-gpu ENGINE=...` environment. For every run
it asserts: the run finished with no failed call; every output is the recorded one (exact
forcing); the per-run counters agree with the per-call reports (device hits + host restores ==
sum of each call's `cached_tokens`); and, where a host tier is on, host restores > 0 (the trace
revisits contexts the small device tier has evicted).

    .venv/bin/python scripts/gpu_check.py [--only vllm-device,sglang-hicache] [--work DIR]

Exit 0: all passed; 1: a check failed (each printed); 2: this machine cannot run it (no GPU, an
engine environment missing), said in one line before anything starts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from replay.engines.preflight import visible_gpu_count  # noqa: E402  (after the path line)

# 12 agents, 61 calls, contexts up to 1.5K tokens (1 KiB of KV each); 6 agents at a time, 2
# requests running: the 6 contexts (up to ~9K tokens) do not fit the 4K-token device tier, so
# they are evicted between an agent's calls and come back, while the 2 running requests (up to
# ~3.6K tokens with their outputs) always fit, so nothing is preempted (a preempted request is
# prefilled twice and the counters could no longer be compared with the calls).
TRACE = (
    'synth = { preset = "swe-agent", tasks = 12, seed = 3, vocab_size = 8192, scale = 0.12, '
    "max_calls_per_task = 6, max_prompt_tokens = 1500 }"
)
COMMON = """
model = "{model}"
served_model_name = "tiny"
env = {{ HF_HUB_OFFLINE = "1", VLLM_NO_USAGE_STATS = "1", DO_NOT_TRACK = "1" }}
"""
VLLM = (
    COMMON
    + """
load_format = "dummy"
kv_cache_memory_bytes = 4194304
max_model_len = 2048
max_num_seqs = 2
enforce_eager = true
"""
)
SGLANG = (
    COMMON
    + """
device_kv_tokens = 4096
max_running_requests = 2
page_size = 16
mem_fraction_static = 0.5
extra_args = ["--load-format", "dummy", "--disable-cuda-graph", "--context-length", "2048"]
"""
)
# name: (engine kind, engine table, host tier GiB per rank)
POINTS = {
    "vllm-device": ("vllm", VLLM, 0),
    "vllm-offload": ("vllm", VLLM, 0.25),
    "lmcache": ("lmcache", VLLM + "chunk_tokens = 256\n", 1),
    "sglang-hicache": ("sglang", SGLANG, 1),
}
EXPERIMENT = """name = "{name}"
repeats = 1
order = "sequential"
[trace]
{trace}
[run]
pool = 6
gap_scale = 0.02
forcing = true
request_timeout_s = 120
[engine]
kind = "{kind}"
python = "{python}"
{table}
[matrix]
host_tier_gib = [{tier}]
[timeouts]
ready_s = 300
run_s = 300
stop_grace_s = 10
"""


def verify_run(run_dir: Path, *, tier_on: bool, exact: bool) -> list[str]:
    """Problems with one finished run directory (empty: it passed)."""
    doc = json.loads((run_dir / "run.json").read_text())
    if doc.get("status") != "ok":
        return [f"run status {doc.get('status')}: {doc.get('reason')}"]
    calls = [json.loads(line) for line in (run_dir / "calls.jsonl").read_text().splitlines()]
    problems = [f"call {c['task']}/{c['call']}: {c['error']}" for c in calls if c["status"] != "ok"]
    if exact:
        inexact = [c for c in calls if c.get("exact_match") != 1.0]
        if inexact:
            c = inexact[0]
            problems.append(
                f"{len(inexact)} of {len(calls)} calls not forced exactly (first: "
                f"{c['task']}/{c['call']} exact_match {c.get('exact_match')})"
            )
    counters = json.loads((run_dir / "counters.json").read_text())
    per_call = [c.get("cached_tokens") for c in calls]
    device, host = counters.get("device_hit_tokens"), counters.get("host_restore_tokens")
    if counters.get("preemptions"):
        # A preempted request is prefilled again: the counters count its hits twice, its call
        # once, so the sums cannot be compared; the point must be sized to avoid preemption.
        problems.append(
            f"{counters['preemptions']:g} preemptions: counters and calls cannot be compared; "
            "lower max_num_seqs or raise the device tier"
        )
    elif None in per_call or device is None:
        problems.append(f"counters or per-call cached_tokens missing: device {device}")
    elif device + (host or 0) != sum(per_call):
        problems.append(
            f"counters: device {device} + host {host} != {sum(per_call)} cached tokens per call"
        )
    if tier_on and not (host or 0) > 0:
        problems.append(f"host tier on but host restores = {host}")
    return problems


def _fail_fast(only: list[str]) -> list[str]:
    """Why this machine cannot run the check at all (empty: it can try)."""
    gpus = visible_gpu_count(os.environ)
    if gpus < 1:
        return [
            "gpu-check needs an NVIDIA GPU and found none (nvidia-smi -L lists none, or "
            "CUDA_VISIBLE_DEVICES hides them); run it on a GPU machine"
        ]
    missing = sorted({POINTS[n][0] for n in only} - {k for k in POINTS_ENVS if _env(k).exists()})
    return [f"no {_env(k)}: build it with `make setup-gpu ENGINE={k}`" for k in missing]


POINTS_ENVS = ("vllm", "lmcache", "sglang")


def _env(kind: str) -> Path:
    return REPO / f".venv-gpu-{kind}" / "bin" / "python"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(POINTS), help="comma-separated point names")
    parser.add_argument("--work", default=str(REPO / ".cache" / "gpu-check"))
    args = parser.parse_args(argv)
    only = [n for n in args.only.split(",") if n]
    unknown = [n for n in only if n not in POINTS]
    if unknown:
        print(f"gpu-check: unknown point {unknown[0]}; valid: {', '.join(POINTS)}", file=sys.stderr)
        return 2
    reasons = _fail_fast(only)
    if reasons:
        print("gpu-check: " + "; ".join(reasons), file=sys.stderr)
        return 2
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    model = work / "tinyllama"
    builder = _env(POINTS[only[0]][0])  # any engine environment has `tokenizers`
    subprocess.run([str(builder), "-m", "replay.engines.tinymodel", str(model)], check=True)
    failed = 0
    for name in only:
        kind, table, tier = POINTS[name]
        text = EXPERIMENT.format(
            name=name, trace=TRACE, kind=kind, python=_env(kind), tier=tier,
            table=table.format(model=model),
        )  # fmt: skip
        exp_file = work / f"{name}.toml"
        exp_file.write_text(text)
        start = time.monotonic()
        replay = [sys.executable, "-m", "replay.cli.main", "sweep", str(exp_file), "--force"]
        done = subprocess.run([*replay, "--results", str(work / "results")], cwd=REPO)
        runs = sorted((work / "results" / name).glob("host_tier_gib=*/r0"))
        if done.returncode != 0 or not runs:
            problems = [f"sweep exit {done.returncode}; see {work / 'results' / name}"]
        else:
            problems = verify_run(runs[0], tier_on=tier > 0, exact=True)
        took = time.monotonic() - start
        failed += bool(problems)
        print(f"{'FAIL' if problems else 'ok  '}  {name:<15} {took:6.0f} s  {'; '.join(problems)}")
    print(f"gpu-check: {len(only) - failed} of {len(only)} points passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
