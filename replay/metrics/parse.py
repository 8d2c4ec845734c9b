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
    """Parse exposition text; a malformed body raises EngineError naming `source` (URL or file)."""
    samples: dict[str, dict[tuple, float]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples.setdefault(sample.name, {})[labels_key(sample.labels)] = float(sample.value)
    except (ValueError, TypeError, IndexError) as e:
        raise EngineError(f"{source}: not Prometheus text exposition: {e}") from None
    return samples
