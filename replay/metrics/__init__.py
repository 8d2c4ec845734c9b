"""Prometheus metrics: parse exposition text, pick samples, scrape servers, canonical counter deltas."""

from replay.metrics.counters import counter_deltas, label_value, sample_sum
from replay.metrics.parse import parse_metrics

__all__ = ["parse_metrics", "sample_sum", "label_value", "counter_deltas"]
