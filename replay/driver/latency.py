"""Token-level latencies of a run: per-call TTFT, TT2T, ITL and request latency, their percentile
table, and goodput against stated service-level objectives (`--slo ttft=2s,itl=50ms`).

Pure functions over call rows (calls.jsonl / calls.parquet), so a report can recompute them.
Rows written before the stream columns existed simply have no TT2T or ITL: those entries are None.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from replay.errors import ConfigError

__all__ = [
    "PERCENTILES",
    "LATENCY_METRICS",
    "call_latencies",
    "percentile_table",
    "goodput",
    "parse_slo",
    "latency_summary",
]

PERCENTILES = (1, 5, 10, 25, 50, 75, 90, 95, 99)
# name -> what it is, for tables and docs
LATENCY_METRICS = {
    "ttft_s": "time to first token",
    "tt2t_s": "time to second token",
    "itl_s": "inter-token latency (= time per output token after the first)",
    "latency_s": "request latency (send to last byte)",
}
_UNITS_S = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
_SLO_KEYS = {k.removesuffix("_s"): k for k in LATENCY_METRICS}


def _diff(a: Any, b: Any) -> float | None:
    return None if a is None or b is None else float(a) - float(b)


def call_latencies(row: Mapping[str, Any]) -> dict[str, float | None]:
    """One ok call's latencies (seconds; None where the call did not measure it).

    ttft = t_first_token - t_send; tt2t = t_second_token - t_send; latency = t_end - t_send;
    itl = (t_last_token - t_first_token) / (n - 1) with n the output tokens (the server's
    count, else the tokens counted in the stream), defined for n >= 2.
    """
    n = row.get("completion_tokens")
    if n is None:
        n = row.get("stream_tokens")
    span = _diff(row.get("t_last_token"), row.get("t_first_token"))
    return {
        "ttft_s": _diff(row.get("t_first_token"), row["t_send"]),
        "tt2t_s": _diff(row.get("t_second_token"), row["t_send"]),
        "itl_s": span / (n - 1) if span is not None and n is not None and n >= 2 else None,
        "latency_s": _diff(row["t_end"], row["t_send"]),
        "one_token": n is not None and n <= 1,  # no gap between tokens to be late (goodput)
    }


def percentile_table(values: Sequence[float]) -> dict[str, float | None]:
    """{"p1": ..., "p99": ...} over `values` (linear interpolation); all None for no values."""
    arr = np.asarray(values, dtype=np.float64)
    if not arr.size:
        return {f"p{q}": None for q in PERCENTILES}
    return {
        f"p{q}": float(v) for q, v in zip(PERCENTILES, np.percentile(arr, PERCENTILES), strict=True)
    }


def parse_slo(text: str) -> dict[str, float]:
    """`ttft=2s,itl=50ms` -> {"ttft_s": 2.0, "itl_s": 0.05}; ConfigError on anything else."""
    out: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",")):
        m = re.fullmatch(r"([a-z0-9]+)\s*=\s*([0-9]*\.?[0-9]+)\s*(s|ms|us)", part)
        if m is None or m.group(1) not in _SLO_KEYS:
            valid = ", ".join(sorted(_SLO_KEYS))
            raise ConfigError(
                "run",
                "--slo",
                f"bad objective {part!r}: write NAME=VALUE with a unit (s, ms, us), e.g. "
                f"ttft=2s,itl=50ms; names: {valid}",
            )
        out[_SLO_KEYS[m.group(1)]] = float(m.group(2)) * _UNITS_S[m.group(3)]
    return out


def goodput(
    per_call: Sequence[Mapping[str, float | None]], calls: int, makespan_s: float, slo_s: Mapping
) -> dict[str, Any]:
    """Calls that met every objective in `slo_s` (a call that did not measure one, e.g. no
    stream, did not meet it; failed calls are not in `per_call`): count, fraction of all calls,
    and per second of makespan. A call of one output token meets an `itl_s` objective: it has
    no gap between tokens, as vLLM's benchmark takes its time per output token as 0 for goodput
    (`vllm/benchmarks/serve.py`, `calculate_metrics`)."""

    def met(lat: Mapping[str, Any], key: str, limit: float) -> bool:
        if key == "itl_s" and lat.get("one_token"):
            return True
        return lat.get(key) is not None and lat[key] <= limit

    good = sum(1 for lat in per_call if all(met(lat, k, v) for k, v in slo_s.items()))
    return {
        "slo_s": dict(slo_s),
        "goodput_calls": good,
        "goodput_fraction": good / calls if calls else None,
        "goodput_per_s": good / makespan_s if makespan_s > 0 else None,
    }


def latency_summary(
    ok_rows: Sequence[Mapping[str, Any]],
    calls: int,
    makespan_s: float,
    slo_s: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """Summary keys: `latency_percentiles` (metric -> p1..p99), flat p50/p90/p99 of TT2T, ITL
    and request latency (the sweep's summary table keeps scalars only), and goodput with `slo_s`."""
    per_call = [call_latencies(r) for r in ok_rows]
    table = {}
    for metric in LATENCY_METRICS:
        vals = [v for lat in per_call if (v := lat[metric]) is not None and math.isfinite(v)]
        table[metric] = percentile_table(vals)
    out: dict[str, Any] = {"latency_percentiles": table}
    for metric in ("tt2t_s", "itl_s", "latency_s"):
        base = metric.removesuffix("_s")
        for q in (50, 90, 99):
            out[f"{base}_p{q}_s"] = table[metric][f"p{q}"]
    if slo_s:
        out.update(goodput(per_call, calls, makespan_s, slo_s))
    return out
