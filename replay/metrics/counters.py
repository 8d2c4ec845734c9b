"""Pure helpers over parsed samples: sums with label filters, label lookups, canonical deltas.

A counter that is absent from a scrape is None, never 0: "the engine does not report it" and "it
stayed at zero" are different facts, and the report must not confuse them. A counter that is
declared but has no series yet has counted nothing: 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from replay.counters import Samples

__all__ = [
    "sample_sum",
    "first_present",
    "label_value",
    "counter_deltas",
    "difference",
    "one_rank",
]


def sample_sum(samples: Samples, name: str, **where: str) -> float | None:
    """Sum of `name` over the series whose labels include every `where` pair; None when `name`
    is not exposed at all, or no series matches the filter; 0 when `name` is declared with no
    series yet (a labelled counter before its first count, see `parse_metrics`)."""
    series = samples.get(name)
    if series is None:
        return None
    if not series:
        return 0.0
    total = None
    for labels, value in series.items():
        lab = dict(labels)
        if all(lab.get(k) == v for k, v in where.items()):
            total = value if total is None else total + value
    return total


def one_rank(samples: Samples, label: str) -> dict[str, dict[tuple, float]]:
    """The samples with, per metric, only the series of the lowest value of `label` (a rank).

    Engines that run one process per tensor-parallel rank can expose one series per rank of the
    same logical count (LMCache's `worker_id`, SGLang's `tp_rank`); summing them multiplies the
    count by TP. Series without the label are kept; other labels (e.g. a data-parallel rank,
    whose counts do add up) are untouched.
    """
    out: dict[str, dict[tuple, float]] = {}
    for name, series in samples.items():
        ranks = {dict(k)[label] for k in series if label in dict(k)}
        if not ranks:
            out[name] = dict(series)
            continue
        first = min(ranks, key=lambda r: (not r.isdigit(), int(r) if r.isdigit() else 0, r))
        out[name] = {k: v for k, v in series.items() if dict(k).get(label, first) == first}
    return out


def first_present(*values: float | None) -> float | None:
    """The first value that is not None (a newer metric name first, then its older spelling)."""
    for v in values:
        if v is not None:
            return v
    return None


def difference(a: float | None, b: float | None) -> float | None:
    """a - b, None if either side is unknown."""
    if a is None or b is None:
        return None
    return a - b


def label_value(samples: Samples, name: str, label: str) -> str | None:
    """The value of `label` on the first series of `name` (info-style gauges like
    vllm:cache_config_info carry configuration in labels); None when absent."""
    for labels in samples.get(name, {}):
        lab = dict(labels)
        if label in lab:
            return lab[label]
    return None


def counter_deltas(
    start: Mapping[str, float | None],
    end: Mapping[str, float | None],
    names: Iterable[str] | None = None,
) -> dict[str, float | None]:
    """end - start per counter name (None where either scrape lacks it).

    A negative delta means the counter was reset (server restarted mid-run); the end value is
    then the best lower bound we have, so it is returned instead of a negative number.
    """
    keys = list(names) if names is not None else list(dict.fromkeys([*start, *end]))
    out: dict[str, float | None] = {}
    for k in keys:
        a, b = start.get(k), end.get(k)
        if a is None or b is None:
            out[k] = None
        else:
            out[k] = b - a if b >= a else b
    return out
