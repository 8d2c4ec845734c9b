"""Run a sweep: every planned run gets a fresh server (or the in-process simulator), a replay,
counters and a run.json; finished runs are skipped on rerun; failures are recorded and skipped past.

A sweep holds an exclusive lock on its results directory, first stops any server a killed sweep
left running (their `server.json` records), and writes `plan.json` (every planned run) so a report
of a partial sweep can say how many runs never started.

The steps of one run (launch, health, reset, replay, scrape, stop) are in
replay.sweep.run_steps; a backend (`Execute`) decides where runs execute: here one after
another, or as Ray tasks (replay.sweep.ray_backend).
"""

from __future__ import annotations

import contextlib
import errno
import platform
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from replay.driver.progress import SweepEta
from replay.engines.registry import get_engine
from replay.errors import ReplayError
from replay.status import RunStatus
from replay.sweep.config import Experiment
from replay.sweep.plan import PlannedRun, plan_runs
from replay.sweep.prepare import (
    check_costs_files,
    check_experiment_file,
    check_trace_file,
    costs_sha256,
    keep_experiment_file,
    load_trace,
    set_aside_runs,
    write_predictions,
)
from replay.sweep.results import (
    PLAN_FILE,
    ResultsWriteError,
    all_calls_failed,
    clear_run_dir,
    exclusive_lock,
    is_finished,
    read_json,
    write_json_atomic,
)
from replay.sweep.run_steps import RecordedInterrupt, RunOutcome, RunSteps, placeholder

__all__ = [
    "RunOutcome",
    "SweepResult",
    "SweepRunner",
    "Execute",
    "run_sweep",
    "run_in_order",
    "outcome_line",
    "PLAN_FILE",
]


@dataclass(frozen=True)
class SweepResult:
    exp_dir: Path
    outcomes: list[RunOutcome]
    interrupted: bool

    @property
    def failed(self) -> list[RunOutcome]:
        return [o for o in self.outcomes if o.status == RunStatus.FAILED]

    def measured_nothing(self, outcome: RunOutcome) -> bool:
        """A failed run, or one whose every call failed (status `errors`)."""
        if outcome.status == RunStatus.FAILED:
            return True
        run = read_json(self.exp_dir / outcome.rel_dir / "run.json")
        return outcome.status == RunStatus.ERRORS and all_calls_failed(run)


class SweepRunner(RunSteps):
    """Executes one experiment's planned runs in order. See `run_sweep`."""

    def __init__(
        self,
        exp: Experiment,
        *,
        force: bool = False,
        order: str | None = None,
        results_root: str | Path | None = None,
        echo: Callable[[str], None] = print,
        keep_all_failed: bool = False,
    ):
        self.exp = exp
        self.force = force
        self.keep_all_failed = keep_all_failed
        self.order = order
        self.exp_dir = Path(results_root or exp.results_dir) / exp.name
        self.echo = echo
        self.trace: Any = None  # replay.trace.model.Trace, loaded by run()
        # recorded in each run.json's provenance, so a node effect shows in the report; a
        # cluster backend names its node more precisely than the host name
        self.node = platform.node()

    def run_one(self, planned: PlannedRun) -> RunOutcome:
        run_dir = self.exp_dir / planned.rel_dir
        if not self.force and is_finished(run_dir, keep_all_failed=self.keep_all_failed):
            return RunOutcome(planned.rel_dir, "skipped", "finished earlier")
        # a server this run directory still records outlived the process that ran it (a node
        # lost mid-run on a cluster, whose run now runs again here): stop it before its record
        # is cleared, since it may hold the device and would otherwise run on with no owner
        from replay.sweep.lifecycle import stop_recorded_server

        stop_recorded_server(run_dir, self.exp.timeouts.stop_grace_s)
        clear_run_dir(run_dir)
        engine, options, run = self.exp.resolve(planned.point)
        adapter = get_engine(engine)
        # Until the driver writes its own, run.json says the run did not finish, with every key
        # the summary reads, so a sweep killed here leaves a row like any other.
        why = "did not finish (the sweep stopped before the replay started)"
        write_json_atomic(run_dir / "run.json", placeholder(self.exp.name, planned, engine, why))
        try:
            if adapter.in_process:
                return self._run_in_process(planned, run_dir, engine, options, run)
            return self._run_launched(planned, run_dir, engine, options, run)
        except ResultsWriteError:
            raise  # a full disk fails every later run too: stop the sweep
        except ReplayError as e:  # in-process runs; launched runs record their own
            self._record(run_dir, planned, engine, {}, RunStatus.FAILED, str(e))
            return RunOutcome(planned.rel_dir, RunStatus.FAILED, str(e))
        except KeyboardInterrupt as e:
            if adapter.in_process and not isinstance(e, RecordedInterrupt):
                self._record(run_dir, planned, engine, {}, RunStatus.INTERRUPTED, "interrupted")
            raise
        except Exception as e:
            if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise ResultsWriteError(
                    f"{run_dir}: cannot write (disk full): {e.strerror}; "
                    "files written before are intact"
                ) from None
            # A bug in an engine, the simulator or the driver fails this run, not the sweep;
            # the traceback goes into run.json for whoever fixes it.
            reason = f"crashed: {type(e).__name__}: {e}"
            self._record(run_dir, planned, engine, {}, RunStatus.FAILED, reason)
            self._add_traceback(run_dir)
            return RunOutcome(planned.rel_dir, RunStatus.FAILED, reason)

    def _add_traceback(self, run_dir: Path) -> None:
        doc = read_json(run_dir / "run.json") or {}
        doc["traceback"] = traceback.format_exc(limit=20)
        write_json_atomic(run_dir / "run.json", doc)

    # -- the sweep --------------------------------------------------------------------------

    def run(self, execute: Execute | None = None) -> SweepResult:
        """Prepare the results directory, run the planned runs with `execute` (default: one
        after another here; the Ray backend spreads them over a cluster), write the summary."""
        from replay.signals import sigterm_as_interrupt

        # SIGTERM or SIGHUP during the preparation too stops as Ctrl-C does (exit 130, said).
        # A backend's session (Ray's connection) opens before the results folder changes: a
        # cluster that does not answer leaves it as it was.
        session = getattr(execute, "session", None)
        with (
            exclusive_lock(self.exp_dir),
            sigterm_as_interrupt(),
            session() if session is not None else contextlib.nullcontext(),
        ):
            return self._run_locked(execute or run_in_order)

    def predict(self) -> None:
        """predictions.json, from the trace and the experiment alone (never from a result), so
        it may be written before or while the runs execute."""
        from replay.sweep.prepare import predictions_wanted

        if self.exp.predict.enabled and predictions_wanted(self.exp_dir, force=self.force):
            # seconds on a paper-scale trace, before the first run's line: say what it does
            self.echo(f"{self.exp.name}: predicting (predictions.json) ...")
        write_predictions(self.trace, self.exp, self.exp_dir, force=self.force)

    def _run_locked(self, execute: Execute) -> SweepResult:
        # imported here, not at the top: a Ray worker imports this module to run one run, and
        # needs neither the HTTP client (launched servers only) nor pandas (the summary)
        from replay.sweep.lifecycle import stop_leftover_servers
        from replay.sweep.summary import write_summary

        for pgid in stop_leftover_servers(self.exp_dir, self.exp.timeouts.stop_grace_s):
            self.echo(f"stopped server process group {pgid} left running by an earlier sweep")
        text = check_experiment_file(self.exp, self.exp_dir, force=self.force)
        if self.exp.trace.synth is not None:  # a paper-scale synthesis takes seconds
            self.echo(f"{self.exp.name}: synthesizing the trace ...")
        self.trace = load_trace(self.exp)
        # a trace file changed in place is another workload: only its sha256 tells
        trace_sha = _file_trace_sha256(self.trace)
        check_trace_file(self.exp, self.exp_dir, trace_sha, force=self.force)
        if execute is run_in_order:
            # Here, before the first launch; on a cluster the head need not have the nodes'
            # GPUs: each node checks itself before its first launch of a point, and the head
            # writes the predictions while the first runs start (ray_backend).
            from replay.engines.preflight import require_ready  # engine environment, GPUs, ...

            require_ready(self.exp, self.trace, self.exp_dir)  # a failure stops the sweep here
        planned = plan_runs(self.exp, self.order)
        costs_sha = costs_sha256(self.exp, planned)
        check_costs_files(self.exp, self.exp_dir, costs_sha, force=self.force)
        if self.force:  # --force starts over: no earlier run may pass for one of this file's
            moved = set_aside_runs(self.exp_dir)
            if moved is not None:
                self.echo(
                    f"{self.exp.name}: moved {moved[1]} earlier run directories to {moved[0]}"
                )
        keep_experiment_file(self.exp_dir, text)
        write_json_atomic(
            self.exp_dir / PLAN_FILE,
            {
                "experiment": self.exp.name,
                "runs": sorted(p.rel_dir for p in planned),
                # the kept experiment.toml's relative paths were written from here
                "experiment_dir": str(Path(self.exp.source).resolve().parent),
                "trace_sha256": trace_sha,
                "costs_sha256": costs_sha,
            },
        )
        if execute is run_in_order:
            self.predict()
        outcomes: list[RunOutcome] = []
        interrupted = False
        try:
            interrupted = execute(self, planned, outcomes)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            from replay.signals import interrupts_deferred

            try:
                # a signal here is raised once both files are written: stopped half way, the
                # summary was missing, or an earlier sweep's that contradicted the runs
                with interrupts_deferred():
                    write_summary(self.exp, self.exp_dir)
            except KeyboardInterrupt:
                interrupted = True  # came while the summary was written, which it finished
            except ResultsWriteError as e:
                if not interrupted:
                    raise
                self.echo(f"replay: {e}")  # the interrupt (exit 130) is the news; say this too
        return SweepResult(self.exp_dir, outcomes, interrupted)


def _file_trace_sha256(trace: Any) -> str | None:
    """sha256 of the trace's file (as its runs record it); None for a generated trace, which
    the experiment file itself pins."""
    from replay.driver.run import trace_sha256

    return trace_sha256(trace) if getattr(trace, "path", None) else None


# How a sweep's planned runs are executed: appends each run's outcome to the list as it comes
# (so an interrupt keeps the ones before it) and returns whether the sweep was interrupted.
Execute = Callable[[SweepRunner, list[PlannedRun], list[RunOutcome]], bool]


def outcome_line(i: int, total: int, outcome: RunOutcome) -> str:
    """`[i/total] <point>/<repeat>: status (why)`, the line a sweep prints per finished run."""
    reason = outcome.reason or ""
    if "\n" in reason:  # a reason that quotes the server's log: its first line here, the rest
        reason = reason.split("\n", 1)[0].rstrip(": ") + "; the server log's tail is in run.json"
    why = f" ({reason})" if reason and outcome.status != RunStatus.OK else ""
    return f"[{i}/{total}] {outcome.rel_dir}: {outcome.status}{why}"


def run_in_order(
    runner: SweepRunner, planned: list[PlannedRun], outcomes: list[RunOutcome]
) -> bool:
    """The local backend: every run here, one after another, in the planned order."""
    eta = SweepEta(len(planned))
    for i, p in enumerate(planned, 1):
        t0 = time.monotonic()
        try:
            outcome = runner.run_one(p)
        except KeyboardInterrupt:
            # out of a launch, a health wait or a server's stop: the run is recorded interrupted
            # (run_one's own finally); say so here too, as a replay's interrupt is said
            outcome = RunOutcome(p.rel_dir, RunStatus.INTERRUPTED, None)
            outcomes.append(outcome)
            runner.echo(outcome_line(i, len(planned), outcome))
            raise
        outcomes.append(outcome)
        skipped = outcome.status == "skipped"
        eta.done(time.monotonic() - t0, skipped=skipped)
        # a skipped run's line carried the last run's time as if its own
        runner.echo(outcome_line(i, len(planned), outcome) + ("" if skipped else str(eta)))
        if outcome.status == RunStatus.INTERRUPTED:
            return True
    return False


def run_sweep(
    exp: Experiment,
    *,
    force: bool = False,
    order: str | None = None,
    results_root: str | Path | None = None,
    echo: Callable[[str], None] = print,
    keep_all_failed: bool = False,
) -> SweepResult:
    """Run (or resume) every planned run of `exp`; write summary.parquet/csv at the end, also
    after a failure or an interrupt. Runs whose run.json says ok/errors are skipped unless
    `force`, except an `errors` run in which every call failed, which runs again unless
    `keep_all_failed`. Raises ConfigError when another sweep holds the results directory.
    With `[cluster] backend = "ray"` the runs are Ray tasks (replay.sweep.ray_backend)."""
    execute: Execute | None = None
    if exp.cluster.backend == "ray":
        from replay.sweep.ray_backend import ray_executor

        execute = ray_executor(exp, echo)  # says what to install before anything is touched
    runner = SweepRunner(
        exp,
        force=force,
        order=order,
        results_root=results_root,
        echo=echo,
        keep_all_failed=keep_all_failed,
    )
    return runner.run(execute)
