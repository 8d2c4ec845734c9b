"""Numbers and comparisons in words, for the report: compact number formats and the generated
"what is real" sentences."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from replay.analysis.compare import DIFFERENT_CLOCKS, NO_DATA, REAL, SINGLE_REPEAT, WITHIN_NOISE
from replay.counters import COMPUTED_PREFILL_TOKENS

__all__ = ["METRIC_NAMES", "comparison_sentence", "fmt_interval", "fmt_num", "fmt_point"]

METRIC_NAMES = {
    "makespan_s": "makespan",
    "study_makespan_s": "study makespan",
    COMPUTED_PREFILL_TOKENS: "computed prefill",
    "host_restore_tokens": "host restores",
    "host_write_tokens": "host writes",
    "device_hit_tokens": "device hits",
    "ttft_p50_s": "median TTFT",
    "ttft_p99_s": "p99 TTFT",
    "write_read_ratio": "write:read ratio",
    "relative_makespan": "makespan / baseline",
    "slowdown_vs_recorded": "makespan / recorded",
    "device_hit_fraction": "device hit fraction",
    "host_hit_fraction": "host hit fraction",
    "evicted_unread_fraction": "written chunks evicted unread",
    "jct_p50_s": "median task JCT",
}
_SCALES = ((1e9, "G"), (1e6, "M"), (1e3, "K"))


def _missing(x: Any) -> bool:
    try:
        return x is None or (isinstance(x, float | int) and math.isnan(float(x))) or pd.isna(x)
    except (TypeError, ValueError):
        return False


def fmt_num(x: Any, digits: int = 4, scale: tuple[float, str] | None = None) -> str:
    """4 significant digits; large counts as 5.281M / 65.2K; `-` for unknown."""
    if _missing(x):
        return "-"
    x = float(x)
    if math.isinf(x):
        return "∞" if x > 0 else "-∞"
    if scale is None:
        scale = next(((f, s) for f, s in _SCALES if abs(x) >= f), (1.0, ""))
    factor, suffix = scale
    return f"{x / factor:.{digits}g}{suffix}"


def fmt_interval(
    mean: Any, half_width: Any, n: Any, lo: Any = None, hi: Any = None, *, show_n: bool = True
) -> str:
    """`mean ± half` in one unit; `mean (n=1)` when one repeat gives no interval (just `mean`
    with `show_n=False`, in a table whose n column says it); min-max when given."""
    if _missing(mean):
        return "-"
    scale = next(((f, s) for f, s in _SCALES if abs(float(mean)) >= f), (1.0, ""))
    text = fmt_num(mean, scale=scale)
    if _missing(half_width):
        return f"{text} (n={int(n) if not _missing(n) else 0})" if show_n else text
    # Float round-off of identical repeats is not noise worth printing.
    tiny = float(half_width) <= 1e-9 * max(abs(float(mean)), 1.0)
    text += " ± 0" if tiny else f" ± {_two_digits(float(half_width), scale)}"
    if not _missing(lo) and not _missing(hi) and float(lo) != float(hi):
        text += f" [{fmt_num(lo, scale=scale)}–{fmt_num(hi, scale=scale)}]"
    return text


def _two_digits(x: float, scale: tuple[float, str]) -> str:
    """`x` in the unit of `scale`, rounded to 2 significant digits and written out (`%.2g` wrote
    a half-width of 134K beside a mean in K as 1.3e+02K)."""
    factor, suffix = scale
    v = x / factor
    if v == 0 or not math.isfinite(v):
        return f"{v:g}{suffix}"
    places = 1 - math.floor(math.log10(abs(v)))  # decimals that keep 2 significant digits
    r = round(v, places)
    if r and math.floor(math.log10(abs(r))) > math.floor(math.log10(abs(v))):
        places -= 1  # 0.0996 rounds to 0.10, not 0.100
    return f"{round(v, places):,.{max(places, 0)}f}{suffix}"


def fmt_point(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={_plain(v)}" for k, v in values.items())


def _plain(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _pct(x: float) -> str:
    return f"{abs(x) * 100:.1f}%" if abs(x) < 10 else f"{abs(x) * 100:.0f}%"


def comparison_sentence(row: Mapping[str, Any], others: Mapping[str, Any]) -> str:
    """One comparison (a row of `compare_levels`) as a sentence with its verdict.

    Example: "host_tier_gib=20 lowers makespan by 40.1% ± 3.2% vs host_tier_gib=0 at
    admission=all (real; Welch p=0.002, n=3 vs 3)."
    """
    factor = row["factor"]
    level = f"{factor}={_plain(row['level'])}"
    base = f"{factor}={_plain(row['baseline'])}"
    metric = METRIC_NAMES.get(str(row["metric"]), str(row["metric"]))
    where = f" at {fmt_point(others)}" if others else ""
    verdict = row["verdict"]
    n = f"n={int(row['n_a'])} vs {int(row['n_b'])}"
    rel, lo, hi = row["rel_diff"], row["rel_low"], row["rel_high"]
    if verdict in (NO_DATA, DIFFERENT_CLOCKS) or _missing(rel):
        why = {
            NO_DATA: NO_DATA,
            DIFFERENT_CLOCKS: f"{DIFFERENT_CLOCKS}: the in-process simulator's virtual seconds "
            "against wall seconds",
        }.get(verdict, "baseline is 0")
        return f"{level} vs {base}{where}: {metric} cannot be compared ({why}, {n})."
    verb = "lowers" if rel < 0 else "raises"
    if verdict == SINGLE_REPEAT and rel == 0:
        return f"{level} and {base} give the same {metric}{where}, from a single repeat: no noise estimate ({n})."
    if verdict == SINGLE_REPEAT:
        return f"{level} {verb} {metric} by {_pct(rel)} vs {base}{where}, from a single repeat: no noise estimate, not called real ({n})."
    spread = "" if _missing(lo) or lo == hi else f" ± {_pct((hi - lo) / 2)}"
    if verdict == REAL:
        # no spread on either side, not p == 0: a p-value underflows to 0 for far-apart
        # means whose repeats do differ
        exact = not _missing(lo) and lo == hi
        why = "identical repeats, no measured noise" if exact else f"Welch p={row['p_value']:.2g}"
        return (
            f"{level} {verb} {metric} by {_pct(rel)}{spread} vs {base}{where} ({REAL}; {why}, {n})."
        )
    assert verdict == WITHIN_NOISE
    if rel == 0:
        return f"{level} and {base} give the same {metric}{where} ({WITHIN_NOISE}; {n})."
    return f"{level} vs {base}{where}: the {metric} difference ({'+' if rel > 0 else '−'}{_pct(rel)}{spread}) is {WITHIN_NOISE} (Welch p={row['p_value']:.2g}, {n})."
