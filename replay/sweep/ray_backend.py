"""The Ray backend of `replay sweep`: each run (point x repeat) is a Ray task that runs the same
per-run code as a local sweep (`SweepRunner.run_one`: launch, health, reset, replay, scrape,
stop) on whichever node has the resources the run asks for; results come home into the same
layout. docs/cluster.md says how to start a cluster.

The head (this process) holds the results directory's lock, skips finished runs, submits the
rest in the planned (seeded, interleaved) order, and writes what comes back. A task writes its
run directory straight into the results directory when its node sees it at the same path (a
shared filesystem, checked with a token file the head writes); otherwise it runs in a temporary
directory and returns the directory's files through Ray. Ray's own retries are off: a task lost
with its node is submitted once more by the head, then recorded failed with the node named; an
engine crash is a result and never retried. Ctrl-C cancels every task (a running one gets
KeyboardInterrupt, so its engine is stopped) and leaves the results resumable.

A node runs the preflight (`replay doctor`'s checks) for a point before its first launch of
it; a failure stops the sweep with one line naming the node (exit 2), as a local preflight
does. The predictions are a task too, submitted first (the longest piece of work before the
runs), and the head writes what it returns: the head itself only submits, waits and writes, so
every slot runs harness work from the start. The task's side is replay.sweep.ray_node.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from replay.errors import ConfigError
from replay.signals import interrupts_deferred
from replay.status import RunStatus
from replay.sweep.cluster_plan import Board, run_resources
from replay.sweep.config import Experiment
from replay.sweep.plan import PlannedRun
from replay.sweep.prepare import predictions_wanted
from replay.sweep.ray_node import TOKEN_PREFIX, node_task, unpack
from replay.sweep.ray_starts import Starts
from replay.sweep.results import (
    PREDICTIONS_FILE,
    clear_run_dir,
    is_finished,
    write_json_atomic,
)
from replay.sweep.run_steps import placeholder
from replay.sweep.runner import RunOutcome, SweepRunner, outcome_line

__all__ = ["RayExecute", "ray_executor", "require_ray", "start_local", "INSTALL_HINT"]

# from the checkout: PyPI's "replay" is another project, so `pip install 'replay[ray]'` would
# fetch that one
INSTALL_HINT = (
    "needs the ray package: make setup-ray, or pip install -e '.[ray]' in this project's checkout"
    " (or: pip install 'ray>=2.40')"
)
_PROGRESS_EVERY_S = 5.0
_LOCAL_OBJECT_STORE_BYTES = 256 * 1024**2  # the runs return a few MiB each; a small store will do
# Ctrl-C first collects the tasks that end within this long, and cancels only the rest. Ray 2.60's
# submitter aborts the whole head process when a cancel meets the reply of a task that is just
# ending ("Check failed: it != submissible_tasks_.end() Tried to complete task that was not
# pending", TaskManager::CompletePendingTask, task_manager.cc:1329 in the driver's log): the
# head died at once, writing no placeholders for the interrupted runs. Runs started together end
# together, so a Ctrl-C right after one ended met the other's reply in 4 of 9 tries of the
# Ctrl-C test (docs/cluster.md).
_SETTLE_S = 0.5
# Ray's own connect to an address where nothing listens retries for about 14 minutes (20 tries
# of ~41 s); one TCP connect with this timeout says so first
_REACH_TIMEOUT_S = 5.0


def require_ray(exp: Experiment) -> Any:
    """The ray module, or a one-line ConfigError (exit 2) saying what to install."""
    try:
        import ray
    except ImportError:
        raise ConfigError(exp.source, "cluster.backend", f"ray {INSTALL_HINT}") from None
    return ray


class RayExecute:
    """The `Execute` of a sweep on Ray (see the module docstring). `session()` joins or starts
    the cluster; the runner enters it once it holds the results directory's lock and before it
    changes anything there, so a cluster that does not answer leaves the folder as it was
    (`--force` had set every finished run aside by then)."""

    def __init__(self, ray: Any, exp: Experiment, echo: Callable[[str], None] = print):
        self.ray, self.exp, self.echo = ray, exp, echo

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        started_here = _connect(self.ray, self.exp)
        try:
            _check_feasible(self.ray, self.exp, self.echo)
            yield
        finally:
            if started_here:
                self.ray.shutdown()

    def __call__(
        self, runner: SweepRunner, planned: list[PlannedRun], outcomes: list[RunOutcome]
    ) -> bool:
        return _Head(self.ray, runner, planned, outcomes).run()


def ray_executor(exp: Experiment, echo: Callable[[str], None] = print) -> RayExecute:
    """The Ray backend for `exp`; checks for ray now, so a missing package is reported before
    the results directory is touched."""
    return RayExecute(require_ray(exp), exp, echo)


def _connect(ray: Any, exp: Experiment) -> bool:
    """Join (or, for "local", start) the cluster; True when this call started Ray. A process
    already connected (a test's shared cluster, a notebook) is used as it is."""
    if ray.is_initialized():
        return False
    address = _address(exp)
    # ray.init puts its own SIGTERM handler (sys.exit(15)) in place of the sweep's, so a kill
    # ended the head with a C++ stack dump instead of an interrupted, resumable sweep
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        if address == "local":
            # a Ctrl-C half way through Ray's start left its agents running with no owner
            with interrupts_deferred():
                start_local(ray, exp.cluster.local_cpus or os.cpu_count() or 1)
        else:
            ray.init(address=address, log_to_driver=False)
    except KeyboardInterrupt:  # raised once Ray had started: stop it again
        with contextlib.suppress(Exception):
            ray.shutdown()
        raise
    except (ConnectionError, RuntimeError, ValueError) as e:
        why = f"cannot connect to Ray at {address!r}: {e}".splitlines()[0]
        raise ConfigError(exp.source, "cluster.address", why + "; see docs/cluster.md") from None
    finally:
        if sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, sigterm)
    return True


def _address(exp: Experiment) -> str:
    """The address to give ray.init. "auto" is the cluster `RAY_ADDRESS` or `ray start` on this
    machine names: Ray's own "auto" also joins any Ray it finds running here, such as another
    sweep's private `--ray local` one, and the sweep died when that one stopped. A host:port
    is refused at once when nothing answers there."""
    address = exp.cluster.address
    if address == "auto":
        address = os.environ.get("RAY_ADDRESS") or _started_cluster() or ""
        if not address:
            raise ConfigError(
                exp.source, "cluster.address", "auto: no Ray cluster was started on this machine "
                "(`ray start`; RAY_ADDRESS is unset either): start one (docs/cluster.md), or use "
                "--ray local for a private Ray, or --ray HOST:PORT",
            )  # fmt: skip
    if address == "local" or "://" in address:
        return address
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(
            exp.source, "cluster.address",
            f"{address!r}: expected auto, local, HOST:PORT or ray://HOST:PORT",
        )  # fmt: skip
    try:
        socket.create_connection((host, int(port)), timeout=_REACH_TIMEOUT_S).close()
    except OSError as e:
        why = f"cannot connect to Ray at {address!r}: nothing answers ({e.strerror or e})"
        raise ConfigError(exp.source, "cluster.address", why + "; see docs/cluster.md") from None
    return address


def _check_feasible(ray: Any, exp: Experiment, echo: Callable[[str], None]) -> None:
    """A run that asks for more of a resource than the whole cluster has waits forever, and
    silently (Ray's "infeasible" warning goes to the driver's log, which the sweep hides):
    refused on a private local Ray, which no node will join; said once on a cluster, which
    may yet grow."""
    have = ray.cluster_resources()
    for point in exp.points():
        need = run_resources(exp, point)
        short = {k: v for k, v in need.items() if v > have.get(k, 0)}
        if not short:
            continue
        what = ", ".join(
            f"{k}={v:g} (the cluster has {have.get(k, 0):g})" for k, v in short.items()
        )
        why = f"a run asks for {what}: no node can run it"
        if exp.cluster.address == "local":
            raise ConfigError(exp.source, "cluster.resources", why)
        echo(f"ray: warning: {why} until one joins")
        return


def _started_cluster() -> str | None:
    """The address `ray start` wrote on this machine (Ray's own reader; None if it has none)."""
    try:
        from ray._private.utils import read_ray_address
    except ImportError:  # a Ray that moved it: RAY_ADDRESS or an explicit address still work
        return None
    return read_ray_address() or None


def start_local(ray: Any, cpus: int) -> None:
    """The private Ray of `--ray local`: `cpus` slots on this machine, no dashboard, a small
    object store. Ray's worker pool is left as it is: keeping idle workers (a longer
    idle_worker_killing_time_threshold_ms) measured slower on the quick sweep."""
    ray.init(
        num_cpus=cpus,
        include_dashboard=False,
        object_store_memory=_LOCAL_OBJECT_STORE_BYTES,
        log_to_driver=False,
    )


class _NodeNotReady(Exception):
    """A node's preflight failed: the sweep stops, as a failed local preflight stops it."""

    def __init__(self, node: str, why: str):
        self.node, self.why = node, why


class _Head:
    def __init__(self, ray: Any, runner: SweepRunner, planned, outcomes: list[RunOutcome]):
        self.ray, self.runner, self.planned, self.outcomes = ray, runner, planned, outcomes
        self.exp = runner.exp
        self.exp_dir = runner.exp_dir.resolve()
        self.token = uuid.uuid4().hex
        self.refs: dict[Any, PlannedRun] = {}
        self.counted = 0
        self.predicting: Any = None  # the predictions task, until the head has written them

    def run(self) -> bool:
        ray = self.ray
        todo = []
        for p in self.planned:
            if not self.runner.force and is_finished(
                self.exp_dir / p.rel_dir, keep_all_failed=self.runner.keep_all_failed
            ):
                self._outcome(RunOutcome(p.rel_dir, "skipped", "finished earlier"))
            else:
                todo.append(p)
        if not todo:
            self.runner.predict()
            return False
        token_file = self.exp_dir / f"{TOKEN_PREFIX}{self.token}"
        token_file.write_text(self.token)
        self.starts = Starts(self.token)
        # One worker process runs many runs, GPU ones too (Ray's default for GPU tasks is a
        # fresh process each): the engine is a child process that frees its GPU when it stops,
        # and the harness is imported and the node checked once per worker.
        self.task = ray.remote(max_calls=0)(node_task)
        self.trace_ref = ray.put(self.runner.trace)
        self.board = Board(total=len(todo))
        try:
            self._submit_predictions()
            for p in todo:
                self._submit(p)
            self._wait_all()
            return False
        except KeyboardInterrupt:
            self._cancel()
            return True
        except _NodeNotReady as e:
            self._cancel()
            why = f"on {e.node}: {e.why}"
            raise ConfigError(self.exp.source, "preflight", why) from None
        except BaseException:
            self._cancel()
            raise
        finally:
            token_file.unlink(missing_ok=True)
            self.starts.close()

    def _submit_predictions(self) -> None:
        """predictions.json as the first task: the longest one, so it starts at once on a slot
        of its own while the others take the runs. It uses the trace and the experiment alone,
        never a result. On the head itself when they are off or no node has a CPU to give."""
        if not predictions_wanted(self.exp_dir, force=self.runner.force):
            return
        if not self.exp.predict.enabled or self.ray.cluster_resources().get("CPU", 0) < 1:
            self.runner.predict()  # a file saying predictions are off costs nothing here
            return
        task = self.task.options(num_cpus=1, num_gpus=0, max_retries=0)
        self.predicting = task.remote("predict", self.exp, self.trace_ref)

    def _predictions_came(self) -> None:
        ray = self.ray
        from ray.exceptions import TaskCancelledError

        ref, self.predicting = self.predicting, None
        try:
            doc = ray.get(ref)
        except TaskCancelledError:
            raise KeyboardInterrupt from None
        except ray.exceptions.RayError:
            # lost with its node, or the model failed there: again here, as a local sweep
            # computes them (a failure then stops the sweep with the model's own error)
            self.runner.predict()
            return
        write_json_atomic(self.exp_dir / PREDICTIONS_FILE, doc)

    def _submit(self, p: PlannedRun) -> None:
        res = dict(run_resources(self.exp, p.point))
        options: dict[str, Any] = {
            "num_cpus": res.pop("CPU", 0),
            "num_gpus": res.pop("GPU", 0),
            "max_retries": 0,  # the head decides: a lost run is resubmitted once, not thrice
        }
        if res:
            options["resources"] = res
        ref = self.task.options(**options).remote(
            "run",
            self.exp,
            self.trace_ref,
            p.point,
            p.repeat,
            str(self.exp_dir),
            self.token,
            list(sys.argv),  # the run.json records the sweep's command, not the worker's
        )
        self.refs[ref] = p
        self.board.submitted(p.rel_dir)

    def _wait_all(self) -> None:
        ray = self.ray
        last_line, last_at = "", 0.0
        while self.refs or self.predicting is not None:
            waiting = list(self.refs)
            if self.predicting is not None:
                waiting.append(self.predicting)
            ready, _ = ray.wait(waiting, num_returns=1, timeout=1.0)
            self._note_starts()
            for ref in ready:
                if ref in self.refs:
                    self._collect(ref, self.refs.pop(ref))
                else:
                    self._predictions_came()
            line = self.board.progress_line(time.monotonic())
            now = time.monotonic()
            if self.refs and line != last_line and now - last_at >= _PROGRESS_EVERY_S:
                self.runner.echo(line)
                last_line, last_at = line, now

    def _note_starts(self) -> None:
        """The nodes of the runs that started since last asked (progress and naming only)."""
        for key, node in self.starts.take():
            self.board.started(key, node, time.monotonic())

    def _collect(self, ref: Any, p: PlannedRun) -> None:
        ray = self.ray
        from ray.exceptions import RayTaskError, TaskCancelledError

        run_dir = self.exp_dir / p.rel_dir
        try:
            result = ray.get(ref)
        except TaskCancelledError:
            raise KeyboardInterrupt from None
        except RayTaskError as e:
            # our own code raised on the node (run_one records crashes itself, so this is a
            # results write on the node that failed): a result, not a lost node
            node = self.board.finished(p.rel_dir, time.monotonic())
            reason = f"crashed on {node or 'an unknown node'}: {str(e).splitlines()[0]}"
            self._write_failed(p, run_dir, reason, node)
            self._outcome(RunOutcome(p.rel_dir, RunStatus.FAILED, reason))
            return
        except ray.exceptions.RayError as e:
            self._note_starts()  # the task recorded its node before its run began
            again, node = self.board.lost(p.rel_dir)
            where = node or "a node that never reported"
            if again:
                self.runner.echo(f"{p.rel_dir}: lost with {where} ({type(e).__name__}); once more")
                self._submit(p)
                return
            self.board.finished(p.rel_dir, time.monotonic())
            reason = f"lost twice with its node, last on {where} ({type(e).__name__})"
            self._write_failed(p, run_dir, reason, node)
            self._outcome(RunOutcome(p.rel_dir, RunStatus.FAILED, reason))
            return
        if "preflight" in result:
            raise _NodeNotReady(result["node"], result["preflight"])
        self.board.finished(p.rel_dir, time.monotonic())
        if result["files"] is not None:
            unpack(run_dir, result["files"])
        self._outcome(RunOutcome(*result["outcome"]))

    def _write_failed(self, p: PlannedRun, run_dir: Path, reason: str, node: str | None) -> None:
        engine = self.exp.resolve(p.point)[0]
        doc = placeholder(self.exp.name, p, engine, reason)
        doc["provenance"] = {"node": node}
        clear_run_dir(run_dir)
        write_json_atomic(run_dir / "run.json", doc)

    def _outcome(self, outcome: RunOutcome) -> None:
        self.outcomes.append(outcome)
        self.counted += 1
        self.runner.echo(outcome_line(self.counted, len(self.planned), outcome))

    def _collect_ended(self, deadline: float, predictions: bool) -> None:
        """Until `deadline` or every run (and with `predictions`, the predictions task) has come
        back: write what each run brought, as a result (a cancelled one brings nothing).
        Predictions that come back are dropped, not written, as cancelled ones are: a rerun
        makes them."""
        ray = self.ray
        while time.monotonic() < deadline:
            waiting = list(self.refs)
            if predictions and self.predicting is not None:
                waiting.append(self.predicting)
            if not waiting:
                return
            left_s = max(0.0, deadline - time.monotonic())
            ready, _ = ray.wait(waiting, num_returns=len(waiting), timeout=min(0.5, left_s))
            for ref in ready:
                if ref not in self.refs:
                    self.predicting = None
                    continue
                p = self.refs.pop(ref)
                with contextlib.suppress(Exception):
                    result = ray.get(ref)
                    if result["files"] is not None:
                        unpack(self.exp_dir / p.rel_dir, result["files"])
                    self._outcome(RunOutcome(*result["outcome"]))

    def _cancel(self) -> None:
        """Ctrl-C: cancel queued tasks and interrupt running ones (their engines stop), wait a
        little for them, and write what came back. Runs still unaccounted for get an
        `interrupted` run.json unless the node wrote one, so resume runs them again."""
        ray = self.ray
        self._collect_ended(time.monotonic() + _SETTLE_S, True)  # no cancel meets a reply
        predicting = [] if self.predicting is None else [self.predicting]
        for ref in [*self.refs, *predicting]:  # the predictions too: a rerun writes them
            with contextlib.suppress(Exception):
                ray.cancel(ref)
        self._collect_ended(time.monotonic() + self.exp.timeouts.stop_grace_s + 5.0, False)
        for p in self.refs.values():
            run_dir = self.exp_dir / p.rel_dir
            # a queued run stays unstarted, as in a local sweep; a running one whose node wrote
            # nothing here (its files were to be shipped) is marked interrupted
            if self.board.node_of(p.rel_dir) is None or (run_dir / "run.json").exists():
                continue
            engine = self.exp.resolve(p.point)[0]
            doc = placeholder(self.exp.name, p, engine, "interrupted (the sweep was stopped)")
            doc["status"] = RunStatus.INTERRUPTED
            write_json_atomic(run_dir / "run.json", doc)
