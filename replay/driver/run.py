"""One replay run, start to finish: picks the loop, handles signals, writes the run directory.

`run_replay` is the synchronous entry point the CLI and the sweep call. It writes calls.jsonl as
calls finish, then calls.parquet, run.json (and counters.json when the transport has counters), per
docs/results.md, and returns the summary. A run.json saying `failed` is written first, so a process
that dies half way leaves a directory that says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hashlib
import os
import platform
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from replay.clock import VirtualTimeLoop
from replay.driver.alloc import keep_freed_memory
from replay.driver.diagnose import diagnose_drift
from replay.driver.fine_timer import new_loop, spun_s
from replay.driver.options import RunOptions
from replay.driver.pool import RunControl, RunResult, replay
from replay.driver.records import (
    JsonlSink,
    length_warnings,
    read_jsonl,
    summarize,
    write_json_atomic,
    write_parquet,
)
from replay.protocol import Transport
from replay.status import CallStatus, RunStatus
from replay.trace.model import Trace

__all__ = [
    "run_replay",
    "EXIT_CODES",
    "exit_code",
    "quiet_gc",
    "freeze_setup",
    "trace_sha256",
    "trace_content_sha256",
]

# run.json status -> process exit code (`errors` still finished; the sweep reads the status)
EXIT_CODES: dict[str, int] = {
    RunStatus.OK: 0,
    RunStatus.ERRORS: 0,
    RunStatus.FAILED: 1,
    RunStatus.INTERRUPTED: 130,
}


def exit_code(status: str) -> int:
    return EXIT_CODES.get(status, 1)


# Cyclic-GC generation-0 threshold while a replay runs (Python's default: 700).
GC_THRESHOLD_RUN = 100_000


# Full collections the interpreter had made when the last `quiet_gc` block ended; None before
# the process's first run (see quiet_gc: a run's own leftovers need one full pass afterwards).
_FULL_PASSES_AT_LAST_RUN_END: int | None = None


def _full_passes() -> int:
    return int(gc.get_stats()[2]["collections"])


@contextlib.contextmanager
def quiet_gc(threshold: int = GC_THRESHOLD_RUN) -> Iterator[None]:
    """Keep the cyclic GC from stalling the event loop while a replay runs.

    Python counts tracked objects allocated minus freed, and collects generation 0 every 700.
    A thousand agents keep tens of thousands of objects alive for a think time each, so that
    count keeps crossing 700: measured at 2K requests/s, 240 collections in 8 s (gen 0 pauses up
    to 5 ms, gen 1 up to 9 ms, gen 2 20-30 ms) made most of the p99 send drift (40-60 ms with
    aiohttp, 3-15 ms with raw); with collections held off, p99 was 1.5-2.3 ms for both. The
    replay's own request path creates no reference cycles, so the count grows only by what
    really stays (a row per call) or by cyclic garbage (errors): a threshold of `threshold`
    still bounds that garbage to about as many objects, collected in one pass.

    Everything loaded before the run (the trace, the imported modules) is frozen out of the
    collector first (`gc.freeze`: moved to a permanent generation that no collection walks), and
    `freeze_setup` does the same for what the run set up. On the way out `gc.unfreeze` merges
    the permanent generation back into the oldest generation (CPython's gcmodule.c,
    `gc_unfreeze_impl`), where the next full collection can free what died meanwhile.

    What is collected before the freeze depends on whether a run ended since the last full
    collection. Before a process's first run only the young generations are (`gc.collect(1)`):
    every unreachable cycle made since the last generation-1 pass, which is what loading leaves;
    a full pass would also walk the whole loaded process (with pandas: 96-122 ms in a quick
    sweep) to find import-time leftovers (about 12,000 objects), which are frozen as memory
    only. After a run, though, its set-up (the pool, the transport, its connections and
    encoded-prompt cache: what `freeze_setup` froze) is garbage in the oldest generation, which
    a young pass skips: frozen again with the next run, it was never freed, and a process that
    ran one replay after another (a sweep, `--repeats`, `make bench`) grew by every run's
    set-up (measured: 85 MB a run at pool 64 with 100K-token prompts, and client CPU a call
    doubling by the third run). So the first run after a run, unless the interpreter made a full
    collection in between, makes a full one.
    """
    global _FULL_PASSES_AT_LAST_RUN_END
    ran = _FULL_PASSES_AT_LAST_RUN_END
    gc.collect(2 if ran is not None and _full_passes() == ran else 1)
    gc.freeze()
    previous = gc.get_threshold()
    gc.set_threshold(threshold, *previous[1:])
    try:
        yield
    finally:
        gc.set_threshold(*previous)
        gc.unfreeze()
        _FULL_PASSES_AT_LAST_RUN_END = _full_passes()


def freeze_setup() -> None:
    """`replay(on_ready=...)` hook: the transport's connections and the agents just created
    live for the whole run; freeze them too, so a collection never walks them. The full
    collection first is cheap here: what was loaded before the run is already frozen
    (`quiet_gc`), so it walks only what the set-up made."""
    gc.collect()
    gc.freeze()


def run_replay(
    trace: Trace,
    transport_factory: Callable[[], Transport],
    options: RunOptions,
    out_dir: str | Path,
    *,
    virtual: bool = False,
    provenance: Mapping[str, Any] | None = None,
    counters_fn: Callable[[], Mapping[str, Any]] | None = None,
    warnings: Sequence[str] = (),
    slo_s: Mapping[str, float] | None = None,
    deadline: tuple[float, str] | None = None,
    on_hurry: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Replay `trace` and write `out_dir`; return the summary plus `status` and `reason`.

    `transport_factory()` is called on the run's loop (a VirtualTimeLoop when `virtual`, else a
    fresh asyncio loop). SIGINT/SIGTERM (main thread): the first stops sending and gives in-flight
    calls `options.interrupt_grace_s`, a second cancels them at once; status `interrupted`. A
    signal outside the replay proper is re-raised after the directory is written. `counters_fn()` returns
    server-side canonical counters merged into the summary and written to counters.json.
    `warnings`: what the caller found before the run (e.g. no served model), reported with the
    run's own (send drift, lengths the server did not confirm) in the summary and on stderr.
    `slo_s`: service-level objectives ({"ttft_s": 2.0, ...}) for the summary's goodput.
    `deadline`: (seconds, reason): past that long the run stops as `failed` with that reason,
    as a signal stops it (no new sends or retries, calls in flight get their grace).
    `on_hurry()`: called from the signal handler on the second signal, whenever it comes, so the
    caller can cut short what it stops afterwards (a sweep: its server's stop grace).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    guard = _SignalGuard(on_hurry)
    with guard:
        summary = _run(
            trace,
            transport_factory,
            options,
            out,
            virtual,
            provenance,
            counters_fn,
            guard,
            warnings,
            slo_s,
            deadline,
        )
    guard.redeliver()
    return summary


def _run(
    trace: Trace,
    transport_factory: Callable[[], Transport],
    options: RunOptions,
    out: Path,
    virtual: bool,
    provenance: Mapping[str, Any] | None,
    counters_fn: Callable[[], Mapping[str, Any]] | None,
    guard: _SignalGuard,
    early_warnings: Sequence[str],
    slo_s: Mapping[str, float] | None = None,
    deadline: tuple[float, str] | None = None,
) -> dict[str, Any]:
    jsonl = out / "calls.jsonl"
    jsonl.unlink(missing_ok=True)
    prov = _provenance(trace, provenance, virtual)
    doc: dict[str, Any] = {
        "status": RunStatus.FAILED,
        "reason": "did not finish (the process stopped before writing its result)",
        "summary": None,
        "provenance": prov,
        "config": options.config_dict(),
    }
    write_json_atomic(out / "run.json", doc)
    sink = JsonlSink(jsonl)
    result: RunResult | None = None
    counters: Mapping[str, Any] | None = None
    cpu_fraction: float | None = None
    spin_fraction: float | None = None
    wall_s = 0.0
    made: dict[str, Any] = {}  # what _main learns of the transport (its name, for diagnosis)
    try:
        if virtual:
            loop: asyncio.AbstractEventLoop = VirtualTimeLoop()
        else:
            keep_freed_memory()  # client CPU per call: see replay/driver/alloc.py
            # timers to the microsecond: see replay/driver/fine_timer.py
            loop = new_loop(options.timer_spin_s)
        # The trace and everything loaded so far live for the whole run: freeze them out of the
        # cyclic GC, whose full passes over a large trace otherwise stall the loop for 50-150 ms
        # (send drift) at unpredictable moments; and collect rarely (see quiet_gc).
        try:
            cpu0, wall0 = time.process_time(), time.perf_counter()
            with quiet_gc():
                result = loop.run_until_complete(
                    _main(trace, transport_factory, options, sink, guard, made, deadline)
                )
            wall_s = time.perf_counter() - wall0
            cpu_fraction = (time.process_time() - cpu0) / wall_s if wall_s > 0 else None
            spin_fraction = spun_s(loop) / wall_s if wall_s > 0 else None
            if counters_fn is not None:
                counters = dict(counters_fn())
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
    finally:
        sink.close()
        prov["ended_at"] = _now_iso()
        prov["load_average_end"] = _load_average()
        # a crash loses no finished call: the parquet holds what the sink wrote, as promised
        rows = result.rows if result is not None else read_jsonl(jsonl)
        write_parquet(rows, out / "calls.parquet")
        if result is None:
            doc["reason"] = f"crashed: {sys.exc_info()[1]!r}"
            write_json_atomic(out / "run.json", doc)
    # a task's tail gap follows its last call: a task a stop cut short has none
    ended = {(r["task"], r["call"]) for r in rows}
    tail_gaps_s = {
        t: (cs[-1].tail_gap_s or 0.0) * options.gap_scale
        for t, cs in trace.tasks.items()
        if (t, cs[-1].index) in ended
    }
    summary = summarize(
        rows, counters=counters, loop_lag_s=result.loop_lag_s, slo_s=slo_s, tail_gaps_s=tail_gaps_s
    )
    summary["calls_total"] = result.total_calls
    summary["calls_skipped"] = result.skipped_calls
    summary["connection_retries"] = result.connection_retries
    # share of one core the replay process used over the run (virtual time: not meaningful)
    summary["client_cpu_fraction"] = None if virtual else cpu_fraction
    # of that, the share spent polling before deadlines (replay/driver/fine_timer.py): CPU used
    # only to send on time, left out when deciding whether the client's core was the limit
    summary["client_spin_fraction"] = None if virtual else spin_fraction
    warnings = list(early_warnings)
    drift = summary["drift_p99_s"]
    healthy_end = result.status in (RunStatus.OK, RunStatus.ERRORS)
    if not virtual and healthy_end and drift is not None and drift > options.drift_warn_s:
        longest = max((r["prompt_tokens"] for r in rows), default=0)
        encode_s = _encode_cost_s(longest, trace.header.vocab_size)
        sent_tokens = sum(r["prompt_tokens"] for r in rows)
        share = None
        if encode_s is not None and wall_s > 0:
            share = encode_s / longest * sent_tokens / wall_s
        diagnosis = diagnose_drift(
            drift,
            options.drift_warn_s,
            client_cpu_fraction=None
            if cpu_fraction is None
            else max(0.0, cpu_fraction - (spin_fraction or 0.0)),
            encode_s=encode_s,
            max_prompt_tokens=longest,
            transport=prov.get("transport") or made.get("transport"),
            encode_share=share,
            spin_fraction=spin_fraction,
        )
        summary["drift_cause"] = diagnosis.cause
        warnings.append(diagnosis.message)
    warnings.extend(length_warnings(rows, summary))
    warnings.extend(unmeasured_objectives(summary, slo_s))
    warnings.extend(getattr(counters_fn, "warnings", ()))  # CounterDeltas: a failed end scrape
    summary["warnings"] = warnings
    reason = result.reason
    if reason is None and result.status == RunStatus.ERRORS:
        reason = _errors_reason(rows, summary)
    doc.update(status=result.status, reason=reason, summary=summary)
    if counters is not None:
        write_json_atomic(out / "counters.json", counters)
    write_json_atomic(out / "run.json", doc)
    for w in warnings:
        print(f"replay: warning: {w}", file=sys.stderr)
    return dict(summary, status=result.status, reason=reason)


def unmeasured_objectives(
    summary: Mapping[str, Any], slo_s: Mapping[str, float] | None
) -> list[str]:
    """An objective no ok call measured fails every call: goodput 0 that says nothing of the
    server (TT2T in the in-process simulator, which streams no second token, or from a server
    that does not stream)."""
    table = summary.get("latency_percentiles") or {}
    out = []
    for key in slo_s or {}:
        if key != "itl_s" and summary.get("calls") and (table.get(key) or {}).get("p50") is None:
            name = key.removesuffix("_s")
            out.append(
                f"no call measured {name} (no stream, or the in-process simulator, which has no "
                f"second token): the {name} objective failed every call, so goodput says "
                "nothing about it"
            )
    return out


def _encode_cost_s(prompt_tokens: int, vocab_size: int, tries: int = 3) -> float | None:
    """Seconds this machine takes to encode one request body of `prompt_tokens` ids (best of
    `tries`, ids drawn across the vocabulary as real prompts are): what a send of the run's
    longest prompt blocks the loop for."""
    if prompt_tokens <= 0:
        return None
    import numpy as np

    from replay.driver.http_common import encode_prompt

    ids = np.random.default_rng(0).integers(0, max(vocab_size, 2), prompt_tokens, dtype=np.int32)
    best = float("inf")
    for _ in range(tries):
        t0 = time.perf_counter()
        encode_prompt(ids)
        best = min(best, time.perf_counter() - t0)
    return best


def _errors_reason(rows: list[dict], summary: dict) -> str:
    """Why a run ended `errors`, in one line: failed calls by kind (the summary's `error_kinds`),
    and the first one's message (a sweep's table and a test's assertion then say what went
    wrong without opening files)."""
    by_kind = ", ".join(f"{k} x{n}" for k, n in sorted(summary["error_kinds"].items()))
    failed = (r for r in rows if r["status"] != CallStatus.OK)
    first = min(failed, key=lambda r: r["t_end"], default=None)
    where = f"; first: {first['task']} call {first['call']}: {first['error']}" if first else ""
    return f"{summary['errors']} of {summary['calls']} calls failed ({by_kind}){where}"


async def _main(
    trace: Trace,
    transport_factory: Callable[[], Transport],
    options: RunOptions,
    sink: JsonlSink,
    guard: _SignalGuard,
    made: dict[str, Any] | None = None,
    deadline: tuple[float, str] | None = None,
) -> RunResult:
    loop = asyncio.get_running_loop()
    control = RunControl()
    if deadline is not None:
        limit_s, why = deadline
        expiry = loop.call_later(limit_s, control.stop, RunStatus.FAILED, why)
    transport = transport_factory()
    if made is not None:
        made["transport"] = getattr(transport, "name", None)

    def on_signal(hits: int) -> None:  # runs in a signal handler: only hand over to the loop
        if hits == 1:
            loop.call_soon_threadsafe(control.stop, RunStatus.INTERRUPTED, "interrupted by signal")
        else:
            loop.call_soon_threadsafe(control.hurry)

    if guard.hits:  # a signal came while the run was being set up: send nothing
        control.stop(RunStatus.INTERRUPTED, "interrupted by signal")
    guard.on_signal = on_signal
    try:
        return await replay(trace, transport, options, sink, control=control, on_ready=freeze_setup)
    finally:
        guard.on_signal = None
        if deadline is not None:
            expiry.cancel()


class _SignalGuard:
    """Owns SIGINT/SIGTERM/SIGHUP for the whole of `run_replay` (main thread only; elsewhere the
    caller handles signals). While the loop runs, the first signal stops sending and the second cancels
    calls in flight. A signal that comes while no loop runs (set-up, writing the results) is
    delivered again to the previous handler once the run directory is complete, so the caller
    (CLI, sweep) still sees its KeyboardInterrupt or SIGTERM."""

    # SIGHUP too: a closed terminal or a dropped ssh session stops the run as Ctrl-C does, with
    # its files written, instead of killing it mid-write
    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self, on_hurry: Callable[[], None] | None = None) -> None:
        self.hits = 0
        self.on_signal: Callable[[int], None] | None = None
        self.on_hurry = on_hurry
        self._unhandled: list[int] = []
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _SignalGuard:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                # an ignored signal stays ignored (`cmd &` from a script starts with SIGINT
                # ignored): taking it over here would obey it in the replay only
                if signal.getsignal(sig) is not signal.SIG_IGN:
                    self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.hits += 1
        # the second signal means "now" wherever it lands: in the loop, or in the end scrape
        # after it, where no loop takes it (before, it only re-raised the first's interrupt)
        if self.hits >= 2 and self.on_hurry is not None:
            self.on_hurry()
        if self.on_signal is not None:
            self.on_signal(self.hits)
        else:
            self._unhandled.append(signum)

    def __exit__(self, *exc: Any) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()

    def redeliver(self) -> None:
        """Raise, through the restored handlers, a signal that no running loop handled."""
        if self._unhandled:
            signal.raise_signal(self._unhandled[0])


def _provenance(trace: Trace, extra: Mapping[str, Any] | None, virtual: bool) -> dict[str, Any]:
    prov: dict[str, Any] = {
        "trace": trace.path,
        "trace_sha256": trace_sha256(trace),
        "trace_calls": len(trace),
        "argv": list(sys.argv),
        "versions": _versions(),
        "git_revision": _git_revision(),
        "host": socket.gethostname(),
        "started_at": _now_iso(),
        "ended_at": None,
        "load_average": _load_average(),
        # whose seconds the times are: the virtual loop's (the in-process simulator) or the
        # wall's; a report compares no time across the two
        "clock": "virtual" if virtual else "wall",
    }
    prov.update(extra or {})
    if virtual and prov.get("engine_version") is None:
        # the virtual-time engine is the in-process simulator: its version is replay's own
        from replay import __version__

        prov["engine_version"] = f"replay-sim {__version__}"
    return prov


def _load_average() -> list[float] | None:
    """The machine's 1, 5 and 15 minute load averages (None where the platform has none): on a
    shared machine they say how much of a run's time other processes took (replay calibrate)."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def trace_sha256(trace: Trace) -> str | None:
    """The sha256 a run records for its trace: of the file's bytes, or of the JSONL text of a
    generated trace (`replay.analysis.trace_ids` reads it back)."""
    return trace.sha256 or (_sha256(trace.path) if trace.path else trace_content_sha256(trace))


def trace_content_sha256(trace: Trace) -> str:
    """sha256 of the JSONL text that `replay trace` would write for a trace: what a run records
    for a trace that has no file (generated by `synth`), so two runs of the same generated
    trace say the same; a plain file `replay trace` wrote has it as its bytes' sha256 too, and
    a gzip one as its text's (`replay predict --order run:DIR` matches a run's trace by it)."""
    from replay.trace.io import _ordered, trace_lines

    h = hashlib.sha256()
    for line in trace_lines(trace.header, _ordered(trace)):
        h.update(line)
    return h.hexdigest()


def _sha256(path: str) -> str | None:
    """The trace file's digest as its reader computes it (None when it cannot be read now)."""
    from replay.errors import TraceError
    from replay.trace.cache import file_sha256

    try:
        return file_sha256(Path(path))[0]
    except TraceError:
        return None


def _versions() -> dict[str, str | None]:
    from importlib import metadata

    out: dict[str, str | None] = {"python": platform.python_version()}
    for pkg in ("replay", "aiohttp", "httpx", "httptools", "numpy", "orjson", "pyarrow"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def _git_revision() -> str | None:
    try:
        cp = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return cp.stdout.strip() or None if cp.returncode == 0 else None


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
