"""The node side of a sweep on Ray: the task that runs one run (point x repeat) through the same
`run_one` as a local sweep, checks its node before the node's first launch of a point, and
ships the run directory home when the node does not see the results directory.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from replay.errors import ConfigError
from replay.sweep.config import Experiment, Point
from replay.sweep.plan import PlannedRun
from replay.sweep.ray_starts import record_start
from replay.sweep.results import clear_run_dir, write_bytes_atomic
from replay.sweep.runner import SweepRunner

__all__ = [
    "TOKEN_PREFIX",
    "node_name",
    "node_task",
    "run_on_node",
    "predict_on_node",
    "pack",
    "unpack",
]

TOKEN_PREFIX = ".ray-token-"

# Preflight verdicts of this worker process, by (sweep token, point): a worker runs many runs
# (the tasks ask for unlimited calls per worker), and a point is checked once per worker.
_CHECKED: dict[tuple[str, str], str | None] = {}


def node_name(ray: Any) -> str:
    """`host (ray node abcd1234)`: the host name, and Ray's node id for nodes sharing one host."""
    import platform

    return f"{platform.node()} (ray node {ray.get_runtime_context().get_node_id()[:8]})"


def _interruptible() -> None:
    """Ray cancels a running task by raising KeyboardInterrupt through Python's SIGINT handler.
    A worker whose Ray was started from a shell job with SIGINT ignored (make or a script in
    the background, no terminal) has no handler, so a cancel would do nothing and the run and
    its engine would go on after Ctrl-C. Tasks run in the worker's main thread."""
    main = threading.current_thread() is threading.main_thread()
    if main and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _preflight(exp: Experiment, trace: Any, point: Point, results_dir: Path, token: str):
    """The checks of `replay doctor` for this point on this node (its engine environment, GPUs,
    model, memory, disk), once per point and worker; the failure's text, or None."""
    key = (token, point.name)
    if key not in _CHECKED:
        from replay.engines.preflight import require_ready

        try:
            require_ready(exp, trace, results_dir, points=[point])
            _CHECKED[key] = None
        except ConfigError as e:
            _CHECKED[key] = e.why
    return _CHECKED[key]


def run_on_node(
    exp: Experiment,
    trace: Any,
    point: Point,
    repeat: int,
    exp_dir: str,
    token: str,
    head_argv: list[str] | None = None,
) -> dict[str, Any]:
    """The task: one run, through the same `run_one` as a local sweep. Returns the outcome, the
    node, and the run directory's files when the node does not share the results directory
    (None when it wrote them in place); or the node's preflight failure, with nothing run."""
    import ray

    _interruptible()
    node = node_name(ray)
    planned = PlannedRun(point, repeat)
    record_start(token, planned.rel_dir, node)  # stored before the run: a lost node is named
    shared = exp.cluster.results == "shared" or (
        exp.cluster.results == "auto" and _sees(Path(exp_dir), token)
    )
    scratch = None if shared else Path(tempfile.mkdtemp(prefix="replay-ray-"))
    try:
        root = Path(exp_dir).parent if scratch is None else scratch
        problem = _preflight(exp, trace, point, root / exp.name, token)
        if problem is not None:
            return {"preflight": problem, "node": node}
        runner = SweepRunner(exp, force=True, results_root=root, echo=lambda s: None)
        runner.trace, runner.node, runner.head_argv = trace, node, head_argv
        run_dir = runner.exp_dir / planned.rel_dir
        try:
            outcome = runner.run_one(planned)
        except BaseException:
            from replay.sweep.lifecycle import stop_recorded_server

            # cancelled (Ctrl-C on the head), maybe while the run was stopping its server: the
            # server this run recorded is stopped before the task ends, whatever was left
            stop_recorded_server(run_dir, exp.timeouts.stop_grace_s)
            raise
        files = None if scratch is None else pack(run_dir)
        return {
            "outcome": (outcome.rel_dir, outcome.status, outcome.reason),
            "node": node,
            "files": files,
        }
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def predict_on_node(exp: Experiment, trace: Any) -> dict[str, Any]:
    """The task that computes predictions.json's content for the head to write: the model's
    passes over the trace are the head's largest piece of work, and here they take a worker
    slot like a run instead of competing with the runs for the head's CPU."""
    _interruptible()
    from replay.sweep.prepare import predictions_doc

    return predictions_doc(trace, exp)


def node_task(kind: str, *args: Any) -> Any:
    """The one remote function of a sweep: `run` (run_on_node) or `predict` (predict_on_node).
    One function, so Ray leases the same workers to both: it keeps a leased worker for further
    tasks of the same function and resources, and with two functions the worker that computed
    the predictions was handed back while a new one started for the runs, importing the harness
    again."""
    kinds: dict[str, Callable[..., Any]] = {"run": run_on_node, "predict": predict_on_node}
    return kinds[kind](*args)


def _sees(exp_dir: Path, token: str) -> bool:
    try:
        return (exp_dir / f"{TOKEN_PREFIX}{token}").read_text() == token
    except OSError:
        return False


def pack(run_dir: Path) -> dict[str, bytes]:
    """Every file of a finished run directory, by path relative to it."""
    return {
        str(p.relative_to(run_dir)): p.read_bytes()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file() and not p.name.endswith(".tmp")
    }


def unpack(run_dir: Path, files: dict[str, bytes]) -> None:
    """Write a shipped run directory home; run.json last, so a head killed half way leaves a
    directory that resume runs again."""
    clear_run_dir(run_dir)
    for rel in sorted(files, key=lambda r: r == "run.json"):
        write_bytes_atomic(run_dir / rel, files[rel])
