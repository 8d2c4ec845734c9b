"""Prometheus text exposition -> `Samples` ({sample name: {label pairs: value}}), via prometheus_client.

Sample names are kept as exposed (`vllm:prompt_tokens_total`, `..._sum`, `..._bucket`), because
that is what users grep for and what engine sources declare; the parser's family names drop
suffixes such as `_total`, which differ between prometheus_client versions.
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from replay.errors import EngineError

__all__ = ["parse_metrics", "labels_key"]


def labels_key(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """The hashable, order-independent key of one label set."""
    return tuple(sorted(labels.items()))


def parse_metrics(text: str, source: str = "metrics") -> dict[str, dict[tuple, float]]:
    """Parse exposition text; a malformed body raises EngineError naming `source` (URL or file).

    A counter declared with no series yet is kept as `NAME_total` with no series: a labelled
    counter shows its first series only when it is first counted (SGLang 0.5.23 creates its
    `cached_tokens_total{cache_source}` series at the first hit), and it has counted nothing
    until then, which is not the same as not existing (`sample_sum` reads it as 0)."""
    samples: dict[str, dict[tuple, float]] = {}
    try:
        for family in text_string_to_metric_families(text):
            if family.type == "counter" and not family.samples:
                samples.setdefault(family.name + "_total", {})
            for sample in family.samples:
                samples.setdefault(sample.name, {})[labels_key(sample.labels)] = float(sample.value)
    except (ValueError, TypeError, IndexError) as e:
        raise EngineError(f"{source}: not Prometheus text exposition: {e}") from None
    return samples
