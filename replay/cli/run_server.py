"""The server side of `replay run --url`: which engine it is, its version, and its counters.

A run scrapes /metrics exactly as a sweep does (the same `MetricsRecorder`, the same adapter
mapping, the same start/end delta), so counters.json of a run and of a sweep run mean the same.
When `--engine-kind` is not given, the adapter is chosen from the metric-name prefixes the server
exposes (vllm:, sglang:, lmcache:, llamacpp:, replay_sim:), as the sweep's `external` engine does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replay.engines.base import EngineAdapter
from replay.errors import EngineError
from replay.metrics.scrape import MetricsRecorder, delta_counters_fn, fetch_samples

__all__ = ["guess_engine_kind", "RunScrape"]


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
        self._recorder = MetricsRecorder(
            self.url, adapter.map_counters, out_dir / "metrics.jsonl", interval_s=interval_s
        )

    def start(self):
        try:
            start = self.adapter.map_counters(self._recorder.start())
        except EngineError as e:
            self.error = f"{e}; no counters.json for this run"
            self.info["metrics_error"] = str(e)
            self._recorder.stop()
            return None
        deltas = delta_counters_fn(self._recorder, self.adapter, start, self.info)

        def fn() -> dict:
            out = deltas()
            self.info["scrape_errors"] = self._recorder.errors  # run.json is written after this
            return out

        return fn

    def stop(self) -> None:
        self._recorder.stop()
        self.info["scrape_errors"] = self._recorder.errors
