"""The steps of one run of a sweep, shared by every backend (here, or a Ray task on a node).

In process (the simulator): replay in virtual time, counters from the simulator. For a launched
engine: start the server in its own process group (log in server.log), wait for health, check
that the configuration took effect (the adapter's `verify` on a scrape), optional warm-up and
cache reset (checked), scrape at replay start, every second (metrics.jsonl) and at the end,
replay, stop the server (SIGTERM to the group, SIGKILL after a grace), then write counters.json
(deltas) and add experiment, point, repeat, engine and server facts to the driver's run.json.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from replay.engines import provenance
from replay.engines.base import EngineAdapter
from replay.engines.registry import get_engine
from replay.errors import EngineError, ReplayError
from replay.status import RunStatus
from replay.sweep.config import Experiment
from replay.sweep.plan import PlannedRun
from replay.sweep.results import read_json, write_json_atomic

if TYPE_CHECKING:
    # Launched servers only, so imported where they are used: a Ray worker running simulator
    # runs never loads the HTTP client for them.
    from replay.metrics.scrape import MetricsRecorder
    from replay.sweep.lifecycle import ServerProcess

__all__ = ["RunOutcome", "RunSteps", "placeholder"]


@dataclass(frozen=True)
class RunOutcome:
    rel_dir: str
    status: str  # ok, errors, failed, interrupted, skipped
    reason: str | None = None


def _run_options(adapter: EngineAdapter, run: Mapping[str, Any]):
    from replay.driver.options import RunOptions

    kwargs = {k: v for k, v in run.items() if k != "transport"}
    kwargs.setdefault("forcing", adapter.forcing)  # force recorded outputs wherever the engine can
    kwargs.setdefault("efficientagent_task_id", adapter.sends_task_id)
    kwargs.setdefault("min_max_tokens", adapter.min_max_tokens)  # what the server accepts
    kwargs.setdefault("progress", sys.stderr.isatty())  # each run's live bar, on a terminal
    return RunOptions(**kwargs, request_extras=adapter.request_extras)


def _seeded(options: Mapping[str, Any], repeat: int) -> dict[str, Any]:
    """The simulator's options for one repeat: its own engine seed (base seed + repeat index),
    so a simulator with service-time jitter gives repeats that differ; without jitter they are
    bit-identical."""
    return dict(options, seed=int(options.get("seed") or 0) + repeat)


def _served_model(options: Mapping[str, Any]) -> str | None:
    name = options.get("served_model_name") or options.get("model")
    return None if name is None else str(name)


class _Watchdog:
    """Kills the server when the run outlasts `limit_s`: the backstop for a replay that did not
    stop itself at its deadline (run_replay's `deadline`) and drain in time."""

    def __init__(self, server: ServerProcess, limit_s: float, grace_s: float):
        self.server, self.limit_s, self.grace_s = server, limit_s, grace_s
        self.timed_out = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sweep-watchdog", daemon=True)

    def _loop(self) -> None:
        deadline = time.monotonic() + self.limit_s
        while not self._stop.wait(0.2):
            if time.monotonic() > deadline and self.server.alive():
                self.timed_out = True
                self.server.stop(self.grace_s)
                return

    def __enter__(self) -> _Watchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=2)


class RecordedInterrupt(KeyboardInterrupt):  # noqa: N818 - it is a KeyboardInterrupt
    """A signal the driver raised once the run's directory was complete: its run.json says how
    the replay ended, and the sweep stops without marking the run interrupted over it."""


@dataclass
class _Launch:
    """What one launched run has gathered so far; the `finally` step records it whatever failed."""

    server: ServerProcess | None = None
    recorder: MetricsRecorder | None = None
    info: dict[str, Any] = field(default_factory=dict)
    prov: dict[str, Any] | None = None
    status_override: str | None = None
    reason: str | None = None
    result_status: str | None = None

    def hurry(self) -> None:
        """A second signal, or one while the server is being stopped: SIGKILL it at its stop
        rather than wait its grace."""
        if self.server is not None:
            self.server.hurry = True


class RunSteps:
    """One run's steps; `SweepRunner` is one, with the experiment, trace and node set."""

    exp: Experiment
    trace: Any  # replay.trace.model.Trace
    node: str  # recorded in each run.json's provenance
    # the sweep's command line where it differs from this process's (a Ray worker's own argv
    # is Ray's default_worker.py; the run is the `replay sweep` on the head)
    head_argv: list[str] | None = None

    def _finish_run_json(self, run_dir: Path, planned: PlannedRun, engine: str, extra: dict) -> str:
        """Add the sweep's facts to run.json (written by the driver, or here if it never ran)."""
        doc = read_json(run_dir / "run.json")
        if not isinstance(doc, dict):
            doc = placeholder(self.exp.name, planned, engine, "the replay did not start")
        doc.update(
            experiment=self.exp.name,
            point=planned.point.as_dict(),
            point_name=planned.point.name,
            repeat=planned.repeat,
            engine=engine,
        )
        server = extra.pop("server", None)
        if server:
            doc["server"] = server
        if extra.get("status_override"):
            doc["status"] = extra["status_override"]
            doc["reason"] = extra.get("reason")
        if extra.get("provenance"):
            doc.setdefault("provenance", {})
            doc["provenance"] = {**extra["provenance"], **(doc["provenance"] or {})}
        prov = doc.get("provenance")
        prov = {**(prov if isinstance(prov, dict) else {}), "node": self.node}
        if self.head_argv is not None:
            prov["argv"] = self.head_argv
        doc["provenance"] = prov
        write_json_atomic(run_dir / "run.json", doc)
        return str(doc.get("status"))

    def _run_in_process(self, planned: PlannedRun, run_dir: Path, engine: str, options, run):
        from replay.driver.run import run_replay
        from replay.sim.options import SimConfig
        from replay.sim.transport import SimTransport

        adapter = get_engine(engine)
        config = SimConfig.from_options(**_seeded(options, planned.repeat))
        holder: dict[str, Any] = {}

        def factory():
            holder["t"] = SimTransport(config, vocab_size=self.trace.header.vocab_size)
            return holder["t"]

        prov = provenance.collect(adapter, options, probe_version=False)
        prov["sim_config"] = config.to_dict()
        prov["trace_spec"] = self.exp.trace.describe()
        try:
            result = run_replay(
                self.trace,
                factory,
                _run_options(adapter, run),
                run_dir,
                virtual=True,
                provenance=prov,
                counters_fn=lambda: holder["t"].counters(),
            )
        except KeyboardInterrupt:
            # raised once run.json was complete (a signal while results were written): the
            # run's own status stands, with the sweep's keys
            self._finish_run_json(run_dir, planned, engine, {})
            raise RecordedInterrupt from None
        status = self._finish_run_json(run_dir, planned, engine, {})
        return RunOutcome(planned.rel_dir, status, result.get("reason"))

    def _warmup_and_reset(self, url: str, adapter: EngineAdapter, options, external: bool) -> None:
        from replay.sweep import control as ctl

        model = _served_model(options)
        # bounded by timeouts.run_s too: a server hung after it was healthy held the sweep here
        # for 600 s a warm-up request, past every configured timeout
        run_s = self.exp.timeouts.run_s
        ctl.warmup(url, model, self.exp.warmup.requests, timeout_s=min(600.0, run_s), total_s=run_s)
        reset_path = options.get("reset_path") or adapter.reset_path
        wanted = self.exp.warmup.reset_cache and (external or self.exp.warmup.requests > 0)
        if reset_path and wanted:
            ctl.reset_and_check(url, str(reset_path), model, timeout_s=min(120.0, run_s))

    def _run_launched(self, planned: PlannedRun, run_dir: Path, engine: str, options, run):
        """One run against a server: reach it (launch, or the user's URL), check it, replay,
        then always stop it and record what happened, whatever failed on the way."""
        adapter = get_engine(engine)
        if adapter.seed_per_repeat:  # the simulator server's jitter: repeats that differ
            options = _seeded(options, planned.repeat)
        st = _Launch()
        try:
            url, mapper = self._reach_server(adapter, options, run_dir, st)
            counters_fn = self._check_server(url, mapper, options, run_dir, st, adapter)
            self._replay_against(url, mapper, options, run, run_dir, st, counters_fn)
        except ReplayError as e:
            st.status_override, st.reason = RunStatus.FAILED, str(e)
        except KeyboardInterrupt as e:
            if not isinstance(e, RecordedInterrupt):  # else run.json says how the replay ended
                st.status_override = RunStatus.INTERRUPTED
                st.reason = "interrupted before the replay finished"
            raise
        finally:
            from replay.signals import interrupts_deferred

            # a signal now cuts the stop's grace short and is raised once the run is recorded
            with interrupts_deferred(on_signal=st.hurry):
                self._stop_server(st)
                self._record(
                    run_dir, planned, engine, st.info, st.status_override, st.reason, st.prov
                )
        doc = read_json(run_dir / "run.json") or {}
        return RunOutcome(planned.rel_dir, str(doc.get("status")), st.reason)

    def _reach_server(
        self, adapter: EngineAdapter, options, run_dir: Path, st: _Launch
    ) -> tuple[str, EngineAdapter]:
        """The server's base URL and the adapter that speaks for it; launches it unless the
        adapter names a running one."""
        if adapter.server_url is not None:
            st.prov = provenance.collect(adapter, options, probe_version=False)
            st.info = {"url": adapter.server_url(options)}
            st.prov["trace_spec"] = self.exp.trace.describe()
            return st.info["url"], adapter.speaking_for(options)
        port = self._port()
        spec = adapter.launch(options, self.exp.host, port)
        if spec is not None and spec.ready_file_flag:
            port = 0  # the server binds a free port itself and announces it
            spec = adapter.launch(options, self.exp.host, port)
        assert spec is not None
        if self.exp.port and port:  # a fixed port: nothing may answer there before our server
            from replay.sweep.lifecycle import check_port_free

            check_port_free(self.exp.host, port)
        from replay.sweep.lifecycle import ServerProcess

        ready_s = self.exp.timeouts.ready_s or spec.ready_timeout_s
        server = ServerProcess(spec, run_dir / "server.log", self.exp.host, port)
        st.server = server
        from replay.sweep.lifecycle import per_run_env

        per_run = per_run_env(spec.env, run_dir.resolve())
        for folder in per_run.values():  # each starts empty: a new run directory's
            Path(folder).mkdir(parents=True, exist_ok=True)
        # the environment as launched: the per-run values, not the adapter's placeholders
        st.prov = provenance.collect(
            adapter, options, argv=server.argv, env={**spec.env, **per_run}
        )
        st.prov["trace_spec"] = self.exp.trace.describe()
        server.start(per_run)
        st.info = {"pid": server.pid, "pgid": server.pgid, "argv": server.argv}
        server.wait_ready(ready_s)
        st.info["url"] = server.base_url
        return server.base_url, adapter

    def _check_server(
        self, url: str, mapper: EngineAdapter, options, run_dir: Path, st: _Launch, adapter
    ) -> Callable[[], dict[str, Any]] | None:
        """Verify the configuration took effect, warm up and reset, start the scraper; returns
        the end-of-run counter function (None when the server has no metrics)."""
        from replay.metrics.scrape import MetricsRecorder, fetch_samples
        from replay.metrics.scrape import delta_counters_fn as _end_counters

        assert st.prov is not None
        st.prov["engine_version"] = st.prov.get("engine_version") or provenance.server_version(url)
        metrics_url = url + mapper.metrics_path
        try:
            first = fetch_samples(metrics_url)
        except EngineError as e:
            first = None
            st.info["metrics_error"] = str(e)
        if first is not None:
            problems = mapper.verify(first, options)
            st.info["config_verified"] = not problems
            if problems:
                raise EngineError("configuration did not take effect: " + "; ".join(problems))
        self._warmup_and_reset(url, mapper, options, adapter.server_url is not None)
        if first is None:
            return None
        st.recorder = MetricsRecorder(
            metrics_url,
            mapper.map_counters,
            run_dir / "metrics.jsonl",
            interval_s=self.exp.timeouts.scrape_interval_s,
        )
        if mapper.metrics_lag_s > 0:  # the warm-up's counts land before the start scrape
            time.sleep(mapper.metrics_lag_s)
        start = mapper.map_counters(st.recorder.start())
        return _end_counters(st.recorder, mapper, start, st.info)

    def _replay_against(
        self, url: str, mapper: EngineAdapter, options, run, run_dir: Path, st: _Launch, counters_fn
    ) -> None:
        """The replay itself, under the run's time limit when this sweep launched the server."""
        from replay.driver.http import DEFAULT_TRANSPORT, http_transport_factory
        from replay.driver.run import run_replay

        run_options = _run_options(mapper, run)
        # the driver's factory: connection limit sized for sub-agents, connections opened
        # before the clock starts
        factory = http_transport_factory(
            url,
            self.trace,
            run_options,
            transport=run.get("transport", DEFAULT_TRANSPORT),
            model=_served_model(options),
        )
        server = st.server
        run_s = self.exp.timeouts.run_s
        past_run_s = f"run exceeded timeouts.run_s = {run_s:g} s"
        with contextlib.ExitStack() as stack:
            dog = None
            if server is not None:
                # the replay stops itself at run_s (no new sends, no retries, its calls in
                # flight drained); the watchdog kills a server still there after that drain
                backstop_s = run_s + run_options.interrupt_grace_s + 5.0
                dog = stack.enter_context(
                    _Watchdog(server, backstop_s, self.exp.timeouts.stop_grace_s)
                )
            try:
                result = run_replay(
                    self.trace,
                    factory,
                    run_options,
                    run_dir,
                    virtual=False,
                    provenance=st.prov,
                    counters_fn=counters_fn,
                    deadline=(run_s, past_run_s),
                    on_hurry=st.hurry,
                )
            except KeyboardInterrupt:
                # the driver raises a signal it did not handle only once run.json is written
                raise RecordedInterrupt from None
        st.reason = result.get("reason")
        st.result_status = result.get("status")
        if dog is not None and dog.timed_out:
            st.status_override = RunStatus.FAILED
            st.reason = past_run_s
        elif (
            server is not None
            and not server.alive()
            and result.get("status") != RunStatus.INTERRUPTED
        ):
            st.status_override = RunStatus.FAILED
            st.reason = f"server exited during the run (exit code {server.returncode()})"

    def _stop_server(self, st: _Launch) -> None:
        """Stop the scraper and the server (when launched); keep the log's tail of a bad run."""
        if st.recorder is not None:
            st.recorder.stop()
            st.info["scrape_errors"] = st.recorder.errors
        if st.server is not None:
            from replay.sweep.lifecycle import log_tail

            st.info["exit_code"] = st.server.stop(self.exp.timeouts.stop_grace_s)
            bad = st.status_override is not None or st.result_status not in (RunStatus.OK, None)
            st.info["log_tail"] = log_tail(st.server.log_path, 40) if bad else None

    def _record(self, run_dir, planned, engine, info, status_override, reason, prov=None) -> None:
        extra: dict[str, Any] = {"server": info, "provenance": prov}
        if status_override is not None:
            extra.update(status_override=status_override, reason=reason)
        self._finish_run_json(run_dir, planned, engine, extra)

    def _port(self) -> int:
        from replay.sweep.lifecycle import free_port

        return self.exp.port or free_port(self.exp.host)


def placeholder(experiment: str, planned: PlannedRun, engine: str, why: str) -> dict[str, Any]:
    """A run.json for a run that did not finish: the same keys and types as a finished one."""
    return {
        "status": "failed",
        "reason": why,
        "summary": None,
        "experiment": experiment,
        "point": planned.point.as_dict(),
        "point_name": planned.point.name,
        "repeat": planned.repeat,
        "engine": engine,
    }
