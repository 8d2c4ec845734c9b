"""The explainer's whole-session model: sessions evicted whole, three prices per turn.

`S` sessions, each with a history of `session_tokens` tokens, keep taking turns. The device holds
`D = floor(device bytes / session bytes)` whole sessions and evicts the least recently used one; a
write-through host tier holds the `H` most recently used (H from its own capacity). A turn pays:
almost nothing if its session is on the device, a host copy (`session bytes / host link`) if it is
only in the host tier, a full recompute of the history otherwise.

Access patterns: `round-robin` (sessions take turns in a fixed cycle, as in the explainer) is LRU's
worst case: while `S <= D` every turn hits, one session more and every turn misses, the cliff the
explainer describes. `random` (each turn picks a session uniformly) degrades as `D / S`. Steady
state only: each session's first turn (always a recompute) is not counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from replay.errors import ConfigError
from replay.model.economics import recompute_s, restore_s
from replay.model.presets import HardwarePreset, ModelPreset

__all__ = [
    "ACCESS",
    "TurnPrices",
    "turn_prices",
    "sessions_that_fit",
    "SessionRates",
    "session_hit_rates",
    "session_curve",
]

ACCESS = ("round-robin", "random")


@dataclass(frozen=True)
class TurnPrices:
    """Seconds a turn spends getting its history into the device, by where the history was."""

    device_hit_s: float
    host_copy_s: float
    recompute_s: float

    def __post_init__(self) -> None:
        if min(self.device_hit_s, self.host_copy_s, self.recompute_s) < 0:
            raise ConfigError("session model", "prices", "prices must be >= 0")


def turn_prices(
    model: ModelPreset,
    hardware: HardwarePreset,
    session_tokens: int,
    *,
    tp: int = 1,
    efficiency: float = 1.0,
    attention: bool = False,
) -> TurnPrices:
    """Prices from the presets: a host copy over one rank's link, a recompute at `efficiency` of peak.

    The default (linear FLOPs only, at peak) is the explainer's own arithmetic: Llama-3-70B, 88K
    tokens on four A100s priced at 312 TFLOP/s each: about 10 s; 88K * 320 KiB over 12 GB/s:
    about 2.4 s.
    """
    return TurnPrices(
        device_hit_s=0.0,
        host_copy_s=restore_s(model, hardware, session_tokens, tp=tp),
        recompute_s=recompute_s(
            model, hardware, session_tokens, tp=tp, efficiency=efficiency, attention=attention
        ),
    )


def sessions_that_fit(capacity_bytes: float, session_tokens: int, bytes_per_token: float) -> int:
    """Whole sessions a tier of `capacity_bytes` holds."""
    if session_tokens <= 0 or bytes_per_token <= 0:
        raise ConfigError("session model", "session_tokens", "tokens and bytes must be positive")
    if capacity_bytes < 0:
        raise ConfigError("session model", "capacity", "must be >= 0")
    return int(math.floor(capacity_bytes / (session_tokens * bytes_per_token)))


@dataclass(frozen=True)
class SessionRates:
    """Fractions of steady-state turns served by each tier, and the mean price of a turn."""

    sessions: int
    device_hit_rate: float
    host_hit_rate: float
    miss_rate: float
    mean_turn_s: float

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def session_hit_rates(
    sessions: int,
    device_sessions: int,
    host_sessions: int,
    prices: TurnPrices,
    *,
    access: str = "round-robin",
) -> SessionRates:
    """Where a steady-state turn finds its session, for `sessions` sessions taking turns."""
    if sessions < 1:
        raise ConfigError("session model", "sessions", f"must be at least 1, got {sessions}")
    if access not in ACCESS:
        raise ConfigError("session model", "access", f"must be one of {', '.join(ACCESS)}")
    if access == "round-robin":
        # cyclic reuse under LRU: all or nothing
        dev = 1.0 if sessions <= device_sessions else 0.0
        any_tier = 1.0 if sessions <= max(device_sessions, host_sessions) else 0.0
    else:
        dev = min(1.0, device_sessions / sessions)
        any_tier = min(1.0, max(device_sessions, host_sessions) / sessions)
    host = max(0.0, any_tier - dev)
    miss = 1.0 - dev - host
    mean = dev * prices.device_hit_s + host * prices.host_copy_s + miss * prices.recompute_s
    return SessionRates(sessions, dev, host, miss, mean)


def session_curve(
    max_sessions: int,
    *,
    session_tokens: int,
    bytes_per_token: float,
    device_bytes: float,
    host_bytes: float,
    prices: TurnPrices,
    access: str = "round-robin",
) -> dict:
    """Hit rates and mean turn price for 1..`max_sessions` sessions, as one JSON-ready dict."""
    d = sessions_that_fit(device_bytes, session_tokens, bytes_per_token)
    h = sessions_that_fit(host_bytes, session_tokens, bytes_per_token)
    return {
        "model": "whole-session-lru",
        "access": access,
        "session_tokens": session_tokens,
        "device_sessions": d,
        "host_sessions": h,
        "prices": dict(prices.__dict__),
        "curve": [
            session_hit_rates(s, d, h, prices, access=access).to_dict()
            for s in range(1, max_sessions + 1)
        ],
    }
