"""Scrape a server's /metrics over HTTP (`plain_get`), once or every second into metrics.jsonl.

The recorder runs in a thread so that it works beside any replay loop (the driver owns its own
asyncio loop); each line is `{"t_s": seconds since the recorder started, "counters": {...}}` with
cumulative canonical values, the time series of docs/results.md.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING

import orjson

from replay.counters import CANONICAL_COUNTERS, Samples
from replay.engines.base import EngineAdapter
from replay.errors import EngineError
from replay.metrics.counters import counter_deltas
from replay.metrics.parse import parse_metrics
from replay.metrics.plain_get import GetError, PlainGetter, get_once

if TYPE_CHECKING:
    import httpx

__all__ = [
    "fetch_text",
    "fetch_samples",
    "MetricsRecorder",
    "http_client",
    "CounterDeltas",
    "delta_counters_fn",
]


def fetch_text(url: str, *, timeout_s: float = 5.0, client: PlainGetter | None = None) -> str:
    """GET `url` and return its body; any transport error or non-2xx is an EngineError."""
    try:
        status, body = get_once(url, timeout_s) if client is None else client.get(url)
    except GetError as e:
        raise EngineError(f"{url}: metrics scrape failed: {e}") from None
    if status // 100 != 2:
        raise EngineError(f"{url}: metrics scrape returned HTTP {status}")
    return body.decode("utf-8", errors="replace")


def fetch_samples(
    url: str, *, timeout_s: float = 5.0, client: PlainGetter | None = None
) -> Samples:
    """Scrape and parse one /metrics page."""
    return parse_metrics(fetch_text(url, timeout_s=timeout_s, client=client), source=url)


class MetricsRecorder:
    """Scrapes `url` every `interval_s` in a background thread and appends canonical counters.

    `first` and `last` hold the parsed samples of the first and latest successful scrapes;
    `errors` counts failed scrapes (a dying server shows up here, and in the gap in the series).
    Use `scrape_now()` for the exact start scrape and `final_scrape()` for the end one.

    A canonical counter that falls between two scrapes was reset (the server restarted): what
    it had counted is kept in `lost` (per counter) and `resets` counts the falls, so the run's
    counters add the counts before each restart to the end scrape, as Prometheus' increase()
    does. A restart that a scrape does not catch below its previous value goes unseen.
    """

    def __init__(
        self,
        url: str,
        map_counters: Callable[[Samples], dict],
        out_path: Path | None,
        *,
        interval_s: float = 1.0,
        timeout_s: float = 5.0,
    ):
        self.url = url
        self.map_counters = map_counters
        self.out_path = out_path
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.first: Samples | None = None
        self.last: Samples | None = None
        self.last_t_s: float | None = None  # when `last` was scraped, from the recorder's start
        self.errors = 0
        self.last_error: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._client = PlainGetter(url, timeout_s)
        self._t0 = time.monotonic()
        self._out: IO[bytes] | None = None
        self._prev: dict = {}
        self.lost: dict[str, float] = {}
        self.resets = 0

    def scrape_now(self) -> Samples:
        """One scrape, recorded in the series; raises EngineError when it fails. For the start
        scrape, before the periodic ones begin, and the end scrape (`final_scrape`)."""
        samples = fetch_samples(self.url, timeout_s=self.timeout_s, client=self._client)
        with self._lock:
            self._keep(samples)
        return samples

    def final_scrape(self) -> Samples:
        """The end scrape: the periodic scrapes stop first, so none lands after it in the series
        (a late one would read as a counter reset), and it does not wait behind one stuck on
        a hung server."""
        with self._lock:
            self._stop.set()
        return self.scrape_now()

    def _keep(self, samples: Samples) -> None:
        if self.first is None:
            self.first = samples
        self.last = samples
        self.last_t_s = time.monotonic() - self._t0
        counters = self.map_counters(samples)
        self._note_resets(counters)
        if self._out is not None:
            line = {"t_s": round(self.last_t_s, 3), "counters": counters}
            self._out.write(orjson.dumps(line) + b"\n")
            self._out.flush()

    def _note_resets(self, counters: dict) -> None:
        fell = False
        for name, value in counters.items():
            before = self._prev.get(name)
            if not isinstance(value, int | float) or not isinstance(before, int | float):
                continue
            if value < before:
                self.lost[name] = self.lost.get(name, 0) + before
                fell = True
        self.resets += fell
        self._prev = counters

    def _loop(self) -> None:
        # its own connection, fetched outside the lock: a scrape stuck on a hung server holds
        # up neither the end scrape nor `stop` (each waited out its timeout behind it before)
        client = PlainGetter(self.url, self.timeout_s)
        try:
            while not self._stop.wait(self.interval_s):
                try:
                    samples = fetch_samples(self.url, timeout_s=self.timeout_s, client=client)
                except EngineError as e:
                    with self._lock:
                        if not self._stop.is_set():
                            self.errors += 1
                            self.last_error = str(e)
                    continue
                with self._lock:
                    if not self._stop.is_set():  # taken after the end scrape: not the run's
                        self._keep(samples)
        finally:
            client.close()

    def start(self) -> Samples:
        """Open the series file, take the start scrape (first line of the series; raises
        EngineError when it fails) and start the periodic scrapes. Returns the start samples."""
        if self.out_path is not None:
            self._out = open(self.out_path, "ab")  # noqa: SIM115 - closed in stop()
        self._t0 = time.monotonic()
        samples = self.scrape_now()
        self._thread = threading.Thread(target=self._loop, name="metrics-recorder", daemon=True)
        self._thread.start()
        return samples

    def stop(self) -> None:
        """Stop the periodic scrapes and close files; safe to call twice. A periodic scrape still
        waiting on the server is left to its timeout: what it brings back is dropped."""
        with self._lock:
            self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=0.5)  # a thread between scrapes ends at once
            self._thread = None
        with self._lock:
            if self._out is not None:
                self._out.close()
                self._out = None
        self._client.close()


def http_client(url: str, timeout_s: float) -> httpx.Client:
    """An httpx client for the sweep's control-plane calls to `url` (resets, launches, probes).
    Plain-http URLs skip building a TLS context (~0.1 s per client, which adds up over a sweep's
    scrapes and probes)."""
    import httpx  # here, not above: a run's scrapes use `plain_get` and never load httpx

    plain = url.startswith("http://")
    return httpx.Client(timeout=timeout_s, verify=not plain)


class CounterDeltas:
    """counters_fn for the driver (a run and a sweep run alike): the end scrape minus the start
    scrape, canonical names. Never raises. A server gone by the end (killed mid-run) gives the
    last periodic scrape minus the start instead, with `end_scrape_error` and
    `counters_until_s` (when that scrape was taken) in `info` (run.json), and a line in
    `warnings` (the run's): the counters of the run up to then, not none, but a shorter span than
    the calls' own columns; with no scrape after the start, None counters. The end scrape
    waits the adapter's `metrics_lag_s` first. `after()` runs once the counters are taken."""

    def __init__(
        self,
        recorder: MetricsRecorder,
        mapper: EngineAdapter,
        start: dict,
        info: dict,
        after: Callable[[], None] | None = None,
    ):
        self.recorder, self.mapper, self.start, self.info = recorder, mapper, start, info
        self.after = after
        self.warnings: list[str] = []

    def __call__(self) -> dict:
        recorder, mapper, start, info = self.recorder, self.mapper, self.start, self.info
        if mapper.metrics_lag_s > 0:  # the engine has not counted the last work yet
            info["metrics_lag_s"] = mapper.metrics_lag_s
            time.sleep(mapper.metrics_lag_s)
        try:
            end = mapper.map_counters(recorder.final_scrape())
            end = _plus_lost(end, recorder)
        except EngineError as e:
            info["end_scrape_error"] = str(e)
            last = recorder.last
            if last is not None and last is not recorder.first:
                end = _plus_lost(mapper.map_counters(last), recorder)
                until_s = round(recorder.last_t_s or 0.0, 3)
                info["counters_until_s"] = until_s
                self.warnings.append(
                    f"the end scrape of /metrics failed ({e}): the server's counters are those "
                    f"of the last periodic scrape, {until_s:g} s after the start, and cover less "
                    "of the run than the calls' own columns (cached tokens, prompt tokens)"
                )
            else:
                end = dict.fromkeys(start)
                self.warnings.append(
                    f"the end scrape of /metrics failed ({e}) and no scrape came after the "
                    "start: no server counters for this run"
                )
        if recorder.resets:
            info["counter_resets"] = recorder.resets
        names = [*CANONICAL_COUNTERS, *(k for k in start if k not in CANONICAL_COUNTERS)]
        out = counter_deltas(start, end, names)
        if self.after is not None:
            self.after()
        return out


def delta_counters_fn(
    recorder: MetricsRecorder, mapper: EngineAdapter, start: dict, info: dict
) -> CounterDeltas:
    """`CounterDeltas` of `recorder`'s run (the sweep's and `replay run --url`'s counters_fn)."""
    return CounterDeltas(recorder, mapper, start, info)


def _plus_lost(end: dict, recorder: MetricsRecorder) -> dict:
    """`end` with what each counter had counted before the restarts the recorder saw."""
    return {
        k: v + recorder.lost[k] if v is not None and k in recorder.lost else v
        for k, v in end.items()
    }
