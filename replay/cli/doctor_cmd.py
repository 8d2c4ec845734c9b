"""`replay doctor FILE` (the preflight, every check printed) and `replay model fetch MODEL`
(download a model's files into the hub cache before a sweep, so no server spends its ready
timeout downloading)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

from replay.engines import preflight, vocab
from replay.errors import ConfigError

_MARK = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL", "skip": "skip"}


@click.command(name="doctor")
@click.argument("experiment_file", type=click.Path(dir_okay=False))
@click.option("--results", "results_root", default=None, help="results root (default: the file's)")
def command(experiment_file: str, results_root: str | None) -> None:
    """Check that this machine can run EXPERIMENT_FILE: the trace reads, engine environment,
    GPUs, memory, model files, trace vocabulary, a results folder that can be made, disk. Exit 2
    when a check fails (a sweep would stop there too)."""
    from replay.sweep.config import load_experiment
    from replay.sweep.prepare import load_trace

    exp = load_experiment(experiment_file)
    loaded: list = []

    def trace():
        if not loaded:
            loaded.append(load_trace(exp))
        return loaded[0]

    results_dir = Path(results_root or exp.results_dir) / exp.name
    first = _trace_check(trace)
    readable = trace if first.status == "ok" else lambda: None
    checks = [first] + preflight.run_checks(exp, readable, results_dir)
    checks.append(_leftover_check(results_dir))
    width = max(len(c.name) for c in checks)
    for c in checks:
        click.echo(f"{_MARK[c.status]}  {c.name:<{width}}  {c.detail}")
    failed = sum(c.status == "fail" for c in checks)
    warned = sum(c.status == "warn" for c in checks)
    click.echo(f"{exp.source}: {failed} failed, {warned} warnings, {len(checks)} checks")
    if failed:
        sys.exit(2)


def _trace_check(trace) -> preflight.Check:  # noqa: ANN001 (the loader stays lazy)
    """The trace the sweep would replay reads and validates (the sweep reads it before its
    first run; a bad one stops it there)."""
    from replay.errors import ReplayError

    try:
        t = trace()
    except ReplayError as e:
        return preflight.Check("trace", "fail", str(e))
    return preflight.Check("trace", "ok", f"{len(t.tasks)} tasks, {len(t)} calls")


def _leftover_check(exp_dir: Path) -> preflight.Check:
    """Servers a SIGKILLed sweep left running (they hold the GPU memory and port a new server
    needs). The next sweep of this file stops them first; doctor only names them."""
    from replay.sweep.lifecycle import running_leftover_servers
    from replay.sweep.results import lock_holder

    holder = lock_holder(exp_dir)
    if holder is not None:
        return preflight.Check("leftover servers", "skip", f"a sweep runs here ({holder})")
    running = running_leftover_servers(exp_dir)
    if not running:
        return preflight.Check("leftover servers", "ok", "none recorded as still running")
    named = "; ".join(
        f"{Path(program).name} (process group {pgid}, run {run.relative_to(exp_dir)})"
        for run, pgid, program in running
    )
    groups = " ".join(f"-{pgid}" for _, pgid, _ in running)
    return preflight.Check(
        "leftover servers",
        "warn",
        f"{len(running)} server(s) of a sweep that was killed still run: {named}; the next "
        f"sweep of this file stops them first, or stop them now: kill -TERM -- {groups}",
    )


# The downloader runs in the engine's environment, where huggingface_hub comes with the engine.
_FETCH = """
import sys
try:
    from huggingface_hub import snapshot_download
except ImportError:
    sys.exit("no huggingface_hub in this interpreter; install it (pip install huggingface_hub)")
print(snapshot_download(sys.argv[1], revision=sys.argv[2] or None))
"""


@click.group(name="model")
def model_command() -> None:
    """Model files for launched engines."""


@model_command.command(name="fetch")
@click.argument("model")
@click.option(
    "--python",
    "python",
    default=sys.executable,
    show_default="this interpreter",
    help="interpreter whose huggingface_hub downloads (the engine's: .venv-gpu-ENGINE/bin/python)",
)
@click.option("--revision", default="", help="branch, tag or commit (default: main)")
def fetch(model: str, python: str, revision: str) -> None:
    """Download MODEL (hub name) into the Hugging Face cache with huggingface_hub's
    snapshot_download, and print where it is; `replay doctor` then finds it."""
    if vocab.is_local_model(model):
        raise ConfigError("model fetch", "MODEL", f"{model} is a local path; nothing to fetch")
    try:
        done = subprocess.run([python, "-c", _FETCH, model, revision], check=False)
    except OSError as e:
        raise ConfigError(
            "model fetch",
            "--python",
            f"cannot run {python}: {e.strerror}; build the engine "
            "environment first (make setup-gpu ENGINE=vllm|sglang|lmcache)",
        ) from None
    if done.returncode != 0:
        raise ConfigError(
            "model fetch", model, f"download failed in {python} (exit {done.returncode})"
        )
