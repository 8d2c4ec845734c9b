"""The server side of `replay run --url`: which engine it is, its version, and its counters.

A run scrapes /metrics exactly as a sweep does (the same `MetricsRecorder`, the same adapter
mapping, the same start/end delta), so counters.json of a run and of a sweep run mean the same.
When `--engine-kind` is not given, the adapter is chosen from the metric-name prefixes the server
exposes (vllm:, sglang:, lmcache:, llamacpp:, replay_sim:), as the sweep's `external` engine does.
Before anything is sent, the served model is settled and the trace's token ids are checked against
its vocabulary; `run_http` then replays over HTTP with that scrape running beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from replay.engines.base import EngineAdapter
from replay.errors import ConfigError, EngineError
from replay.metrics.scrape import CounterDeltas, MetricsRecorder, fetch_samples

__all__ = [
    "guess_engine_kind",
    "RunScrape",
    "UrlServer",
    "model_to_send",
    "run_http",
    "check_vocabulary",
]


def guess_engine_kind(root: str, metrics_path: str = "/metrics") -> tuple[str, str]:
    """(kind, how it was chosen): the registered adapter whose metric prefix the server exposes,
    or `external` (openai extras, counters left unknown) when none matches or /metrics fails."""
    from replay.engines.registry import adapter_for_metrics

    try:
        samples = fetch_samples(root + metrics_path)
    except EngineError as e:
        return "external", f"not guessed: {e}"
    adapter = adapter_for_metrics(samples)
    if adapter.name == "unknown":
        return "external", "not guessed: no known metric prefix in /metrics"
    return adapter.name, "guessed from the metric-name prefixes of /metrics"


class RunScrape:
    """Start scrape, periodic scrapes into metrics.jsonl, and the end-minus-start counters.

    `start()` returns the driver's `counters_fn`, or None (with `error` set) when /metrics
    cannot be read: the run goes on, and says so, rather than failing for want of counters.
    """

    def __init__(self, root: str, adapter: EngineAdapter, out_dir: Path, interval_s: float):
        self.url = root + adapter.metrics_path
        self.adapter = adapter
        self.info: dict[str, Any] = {"metrics_url": self.url, "scrape_interval_s": interval_s}
        self.error: str | None = None
        self.mismatch: str | None = None  # the given kind's metrics are not what the server has
        self._recorder = MetricsRecorder(
            self.url, adapter.map_counters, out_dir / "metrics.jsonl", interval_s=interval_s
        )

    def start(self):
        try:
            samples = self._recorder.start()
            start = self.adapter.map_counters(samples)
        except EngineError as e:
            self.error = f"{e}; no counters.json for this run"
            self.info["metrics_error"] = str(e)
            self._recorder.stop()
            return None
        self.mismatch = _kind_mismatch(self.adapter, samples, start)

        def count_errors() -> None:  # run.json is written after the counters are taken
            self.info["scrape_errors"] = self._recorder.errors

        return CounterDeltas(self._recorder, self.adapter, start, self.info, after=count_errors)

    def stop(self) -> None:
        self._recorder.stop()
        self.info["scrape_errors"] = self._recorder.errors


def _kind_mismatch(adapter: EngineAdapter, samples, start: dict) -> str | None:
    """Why every counter reads null though /metrics answered: the engine kind's metrics are
    not there, and another known engine's are (a given --engine-kind that names another engine)."""
    if any(v is not None for v in start.values()):
        return None
    from replay.engines.registry import adapter_for_metrics

    found = adapter_for_metrics(samples)
    if found.name in ("unknown", adapter.name):
        return None
    return (
        f"the server's /metrics has {found.name}'s metrics, not {adapter.name}'s: every counter "
        f"is null; give --engine-kind {found.name}, or leave it out to guess"
    )


@dataclass(frozen=True)
class UrlServer:
    """The server of a --url run: where, whose adapter (and how it was chosen), scrape pace."""

    url: str
    adapter: EngineAdapter
    kind_note: str
    scrape_interval_s: float


def model_to_send(url: str, served_model: str | None, strict: bool) -> tuple[str | None, list[str]]:
    """The `model` to send (given, else the first id of /v1/models) and a warning without one.
    Nothing listening at the URL is refused here, before --out is made: the run would otherwise
    fail at once, after a warning about model ids that named the wrong cause."""
    from replay.driver.control import first_model_id
    from replay.driver.http_common import HttpOptions
    from replay.metrics.plain_get import GetError, get_once

    root = HttpOptions(url).root
    answered: str | None = None
    status = None
    silent = False
    try:  # one GET: whether anything listens, and the model it serves
        status, body = get_once(root + "/v1/models", 5.0)
        answered = first_model_id(status, body)
    except GetError as e:
        # a name that does not resolve, TLS to a plain-HTTP port, a reset: no server to replay
        # against, and every call would fail while the run still waited out every gap
        if e.refused:
            raise ConfigError(
                "run", "--url", f"nothing listens at {root} ({e}): start the server, or fix the URL"
            ) from None
        if not e.timed_out:
            raise ConfigError("run", "--url", f"no server at {root} ({e}): fix the URL") from None
        silent = True
    if status == 404 and served_model is None:  # a wrong path: every completion 404s too
        raise ConfigError(
            "run",
            "--url",
            f"no /v1/models at {root} (HTTP 404): fix the URL's path, or give --served-model "
            "NAME for a server without a models list",
        )

    model = served_model or answered
    if model is not None:
        return model, []
    # Servers that serve one model accept requests without `model`; others refuse every call.
    why = f"GET {root}/v1/models gave no model id"
    if silent:
        why = f"GET {root}/v1/models did not answer within 5 s, so no model id"
    if strict:
        raise ConfigError("run", "--served-model", f"{why}; give --served-model NAME")
    return None, [f"{why}: requests carry no `model` field (give --served-model NAME)"]


def run_http(trace, options, out_dir, server: UrlServer, model, warnings, transport_name, slo_s):
    from replay.cli.run_server import RunScrape
    from replay.driver.http import http_transport_factory
    from replay.driver.http_common import HttpOptions
    from replay.driver.run import run_replay
    from replay.engines.provenance import server_version

    url = server.url
    root = HttpOptions(url).root
    factory = http_transport_factory(url, trace, options, transport=transport_name, model=model)
    prov = {
        "url": url,
        "engine": server.adapter.name,
        "engine_kind": server.kind_note,
        "engine_version": server_version(root),
        "served_model": model,
        "transport": transport_name,
    }
    # the sweep's own scrape: start, every scrape_interval_s into metrics.jsonl, end - start
    scrape = RunScrape(root, server.adapter, Path(out_dir), server.scrape_interval_s)
    counters_fn = scrape.start()
    if scrape.error:  # a server without /metrics: the replay's own numbers stand
        click.echo(f"replay: note: {scrape.error}", err=True)
    if scrape.mismatch:
        click.echo(f"replay: warning: {scrape.mismatch}", err=True)
        warnings = [*warnings, scrape.mismatch]
    prov["metrics"] = scrape.info
    try:
        return run_replay(
            trace,
            factory,
            options,
            out_dir,
            provenance=prov,
            warnings=warnings,
            counters_fn=counters_fn,
            slo_s=slo_s,
        )
    finally:
        scrape.stop()


def check_vocabulary(trace, model: str | None) -> None:
    """Stop before sending anything when the trace's ids pass the served model's vocabulary
    (vLLM would answer 400 to every call); known where the model's config.json is here: a local
    model directory, or the hub cache."""
    from replay.engines import vocab

    size = vocab.vocab_size(model) if model else None
    problem = vocab.vocab_problem(trace, size, str(model)) if size else None
    if problem:
        raise ConfigError(str(trace.path or "trace"), "vocabulary", problem)
