"""Host-write admission: which candidate chunks a call may write into the host tier.

Pure; time is passed in. `all` and `ttl` write everything (ttl acts on the device tier instead);
`fixed` declines a call's writes when it has more than kappa new full chunks; `conditioned` declines
such calls only under pressure (the windowed working-set estimate exceeds the tier, the tier is full
and has evicted within the window), after the EfficientAgent connector; `rate` is a plain token
bucket in bytes/s with one second of burst (at least one chunk), writing chunks in prompt order while budget lasts.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from replay.sim.host import HostTier

__all__ = ["Admission", "make_admission"]


class Admission:
    """Base: admit everything. `observe_lookup` feeds the runtime estimator (first lookup of a call)."""

    name = "all"

    def observe_lookup(self, task: str, prompt_tokens: int, now: float) -> None:
        pass

    def select(self, candidates: np.ndarray, now: float, host: HostTier) -> np.ndarray:
        return candidates


class FixedAdmission(Admission):
    name = "fixed"

    def __init__(self, kappa: int):
        self.kappa = kappa

    def select(self, candidates, now, host):
        return candidates[:0] if len(candidates) > self.kappa else candidates


class ConditionedAdmission(Admission):
    """Decline calls with more than kappa new chunks only while the tier is under pressure.

    Working-set estimate (bytes) = (active tasks in the window - 1) * mean prompt tokens of the
    window's first lookups * bytes per token: the closed form (A-1)*N*beta with beta = 1.
    """

    name = "conditioned"

    def __init__(self, kappa: int, window_s: float, bytes_per_token: int, capacity_bytes: int):
        self.kappa = kappa
        self.window_s = window_s
        self.bytes_per_token = bytes_per_token
        self.capacity_bytes = capacity_bytes
        self._lookups: deque[tuple[float, str, int]] = deque()

    def observe_lookup(self, task, prompt_tokens, now):
        self._lookups.append((now, task, prompt_tokens))
        self._trim(now)

    def _trim(self, now: float) -> None:
        q = self._lookups
        while q and q[0][0] < now - self.window_s:
            q.popleft()

    def working_set_bytes(self, now: float) -> float:
        self._trim(now)
        if not self._lookups:
            return 0.0
        active = len({t for _, t, _ in self._lookups})
        mean_prompt = sum(n for _, _, n in self._lookups) / len(self._lookups)
        return max(0, active - 1) * mean_prompt * self.bytes_per_token

    def under_pressure(self, now: float, host: HostTier) -> bool:
        evicting = host.last_evict_at is not None and host.last_evict_at >= now - self.window_s
        return host.full and evicting and self.working_set_bytes(now) > self.capacity_bytes

    def select(self, candidates, now, host):
        if len(candidates) > self.kappa and self.under_pressure(now, host):
            return candidates[:0]
        return candidates


class RateAdmission(Admission):
    """Token bucket: `rate_bytes_s` refill, one second of burst; chunks written while budget lasts."""

    name = "rate"

    def __init__(self, rate_bytes_s: float, chunk_bytes: int):
        self.rate = rate_bytes_s
        self.chunk_bytes = chunk_bytes
        self.burst = max(rate_bytes_s, chunk_bytes)  # one second, and never less than a chunk
        self._tokens = self.burst
        self._t = 0.0

    def select(self, candidates, now, host):
        self._tokens = min(self.burst, self._tokens + (now - self._t) * self.rate)
        self._t = now
        n = min(len(candidates), int(self._tokens // self.chunk_bytes))
        self._tokens -= n * self.chunk_bytes
        return candidates[:n]


def make_admission(cfg) -> Admission:
    """The admission policy of a SimConfig (explicit registry; names validated by SimConfig)."""
    if cfg.admission in ("all", "ttl"):
        a = Admission()
        a.name = cfg.admission
        return a
    if cfg.admission == "fixed":
        return FixedAdmission(cfg.kappa)
    if cfg.admission == "conditioned":
        return ConditionedAdmission(
            cfg.kappa, cfg.window_s, cfg.bytes_per_token, cfg.host_chunks * cfg.chunk_bytes
        )
    if cfg.admission == "rate":
        return RateAdmission(cfg.rate_limit_gib_s * (1 << 30), cfg.chunk_bytes)
    raise ValueError(f"unknown admission {cfg.admission!r}")
