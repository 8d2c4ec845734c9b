"""Closed-form reuse working set `C = (A - 1) * N * beta` and its pressure on each host tier.

Between two calls of one agent, the other `A - 1` agents of the pool each touch about one mean
prompt of KV (`N` tokens of `beta` bytes per rank). An LRU tier keeps the first agent's prefix only
if it holds all of that, so `C / tier` above 1 says the tier cannot hold what the pool reuses
(the EfficientAgent study's argument; numbers per tensor-parallel rank).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from replay.errors import ConfigError
from replay.model.presets import GIB

__all__ = ["working_set_bytes", "pressure_ratio", "ClosedForm", "closed_form"]


def working_set_bytes(pool: int, mean_prompt_tokens: float, bytes_per_token: float) -> float:
    """Reuse working set in bytes per rank: `(pool - 1) * mean_prompt_tokens * bytes_per_token`."""
    if pool < 1:
        raise ConfigError("closed form", "pool", f"must be at least 1, got {pool}")
    if mean_prompt_tokens < 0 or bytes_per_token <= 0:
        raise ConfigError(
            "closed form",
            "mean_prompt_tokens/bytes_per_token",
            "mean prompt must be >= 0 and bytes per token > 0",
        )
    return float((pool - 1) * mean_prompt_tokens * bytes_per_token)


def pressure_ratio(working_set_bytes: float, tier_gib: float) -> float:
    """Working set / tier capacity (`inf` for an empty tier): above 1 the tier cannot hold the reuse."""
    if tier_gib < 0:
        raise ConfigError("closed form", "tier_gib", f"must be >= 0, got {tier_gib}")
    if tier_gib == 0:
        return math.inf if working_set_bytes > 0 else 0.0
    return working_set_bytes / (tier_gib * GIB)


@dataclass(frozen=True)
class ClosedForm:
    """The closed form for one pool, with the pressure on each tier (same order as `tiers_gib`)."""

    pool: int
    mean_prompt_tokens: float
    bytes_per_token: float
    tiers_gib: tuple[float, ...]
    working_set_gib: float
    pressure_ratio: tuple[float, ...]

    def to_dict(self) -> dict:
        return {
            "pool": self.pool,
            "mean_prompt_tokens": self.mean_prompt_tokens,
            "bytes_per_token": self.bytes_per_token,
            "tiers_gib": list(self.tiers_gib),
            "working_set_gib": self.working_set_gib,
            # JSON has no infinity: an empty tier's ratio is reported as null
            "pressure_ratio": [None if math.isinf(p) else p for p in self.pressure_ratio],
        }


def closed_form(
    pool: int, mean_prompt_tokens: float, bytes_per_token: float, tiers_gib: Sequence[float]
) -> ClosedForm:
    """Working set in GiB and the pressure ratio on every tier."""
    ws = working_set_bytes(pool, mean_prompt_tokens, bytes_per_token)
    tiers = tuple(float(t) for t in tiers_gib)
    return ClosedForm(
        pool=pool,
        mean_prompt_tokens=float(mean_prompt_tokens),
        bytes_per_token=float(bytes_per_token),
        tiers_gib=tiers,
        working_set_gib=ws / GIB,
        pressure_ratio=tuple(pressure_ratio(ws, t) for t in tiers),
    )
