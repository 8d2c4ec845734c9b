"""Prometheus exposition of the simulator's counters (`replay_sim:` prefix, canonical names)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from replay.counters import COMPUTED_PREFILL_TOKENS

__all__ = ["PREFIX", "SimCollector", "exposition"]

PREFIX = "replay_sim:"

_HELP = {
    "prompt_tokens": "prompt tokens received",
    "output_tokens": "output tokens generated",
    "device_hit_tokens": "prompt tokens found in the device prefix cache",
    "host_restore_tokens": "prompt tokens restored from the host tier",
    COMPUTED_PREFILL_TOKENS: "prompt tokens computed (prompt - device hits - host restores, "
    "plus recompute after a preemption)",
    "host_write_tokens": "tokens written to the host tier",
    "host_evicted_tokens": "tokens evicted from the host tier",
    "preemptions": "requests preempted (recompute)",
}


class SimCollector:
    """Reads counters and gauges from callables at scrape time."""

    def __init__(
        self,
        counters: Callable[[], dict[str, int]],
        gauges: Callable[[], dict[str, float]],
    ):
        self._counters = counters
        self._gauges = gauges

    def collect(self) -> Iterator[Metric]:
        for name, value in self._counters().items():
            m = CounterMetricFamily(PREFIX + name, _HELP.get(name, name.replace("_", " ")))
            m.add_metric([], float(value))
            yield m
        for gname, gvalue in self._gauges().items():
            g = GaugeMetricFamily(PREFIX + gname, gname.replace("_", " "))
            g.add_metric([], float(gvalue))
            yield g


def exposition(collector: SimCollector) -> bytes:
    """Prometheus text format of one collector."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    return generate_latest(reg)
