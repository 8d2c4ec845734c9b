"""Host-write admission: whether a request may write its chunks into the host tier.

Pure; time and the tier's telemetry are passed in. `fixed` and `conditioned` decide once per
request, at its first lookup (before prefill), as the EfficientAgent release's connector does:
the request has u = floor(n/b) - floor(h/b) new chunks (n prompt tokens, h the prefix the host
tier already holds, b tokens per chunk) and more than kappa of them decline all its writes.
`conditioned` declines such requests only under pressure: the windowed working-set estimate
(A-1)·N̄·β exceeds the tier, the tier is at least 95% full, and it evicted within the window;
telemetry older than 5 s falls back to the estimate alone. `all` and `ttl` write everything (ttl
acts on the device tier instead); `rate` is a token bucket in bytes/s with one second of burst
(at least one chunk), writing chunks in prompt order while budget lasts.

`DeclineReuse` measures the study's Proposition 1: the share of declined chunks that a tier of
this size would have evicted before their next reuse anyway (stack distance at least the
capacity), or that are never reused.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

__all__ = ["Admission", "Telemetry", "DeclineReuse", "make_admission", "FULL_SHARE", "STALE_S"]

FULL_SHARE = 0.95  # the tier counts as full from this share of its capacity
STALE_S = 5.0  # telemetry older than this is ignored (the estimate alone decides)
RECENT_LOOKUPS = 256  # N̄ is the mean prompt of this many latest first lookups


@dataclass(frozen=True)
class Telemetry:
    """What the host tier reported at `at_s`: its fill share and its last eviction time."""

    fill_share: float
    last_evict_at: float | None
    at_s: float


class Admission:
    """Base: admit everything. `admit` is asked once per request, at its first lookup."""

    name = "all"
    # whether `admit` or `select` can ever turn a chunk away (the engine keeps the reuse
    # distances of declined chunks only then)
    may_decline = False

    def admit(
        self, task: str, prompt_tokens: int, held_tokens: int, now: float, tel: Telemetry | None
    ) -> bool:
        return True

    def select(self, candidates: np.ndarray, now: float) -> np.ndarray:
        """The chunks an admitted request writes now (all but `rate`: every candidate)."""
        return candidates


class FixedAdmission(Admission):
    """Decline a request with more than kappa new chunks (u = floor(n/b) - floor(h/b))."""

    name = "fixed"
    may_decline = True

    def __init__(self, kappa: int, chunk_tokens: int):
        self.kappa = kappa
        self.chunk_tokens = chunk_tokens

    def new_chunks(self, prompt_tokens: int, held_tokens: int) -> int:
        b = self.chunk_tokens
        return prompt_tokens // b - held_tokens // b

    def admit(self, task, prompt_tokens, held_tokens, now, tel):
        return self.new_chunks(prompt_tokens, held_tokens) <= self.kappa


class ConditionedAdmission(FixedAdmission):
    """`fixed`'s rule, applied only while the tier is under pressure.

    A = distinct tasks looked up in the last `window_s`; N̄ = mean prompt tokens of the last 256
    first lookups; β = bytes per token. Pressure: (A-1)·N̄·β > capacity, and (with telemetry at
    most 5 s old) the tier is >= 95% full and evicted within the last `window_s`.
    """

    name = "conditioned"

    def __init__(
        self,
        kappa: int,
        chunk_tokens: int,
        window_s: float,
        bytes_per_token: int,
        capacity_bytes: int,
    ):
        super().__init__(kappa, chunk_tokens)
        self.window_s = window_s
        self.bytes_per_token = bytes_per_token
        self.capacity_bytes = capacity_bytes
        self._seen: deque[tuple[float, str]] = deque()
        self._count: dict[str, int] = {}
        self._prompts: deque[int] = deque(maxlen=RECENT_LOOKUPS)

    def _observe(self, task: str, prompt_tokens: int, now: float) -> None:
        self._seen.append((now, task))
        self._count[task] = self._count.get(task, 0) + 1
        self._prompts.append(prompt_tokens)
        self._trim(now)

    def _trim(self, now: float) -> None:
        q, count = self._seen, self._count
        while q and q[0][0] < now - self.window_s:
            _, task = q.popleft()
            count[task] -= 1
            if not count[task]:
                del count[task]

    def working_set_bytes(self, now: float) -> float:
        """(A-1)·N̄·β from the lookups seen so far."""
        self._trim(now)
        if not self._prompts:
            return 0.0
        mean_prompt = sum(self._prompts) / len(self._prompts)
        return max(0, len(self._count) - 1) * mean_prompt * self.bytes_per_token

    def under_pressure(self, now: float, tel: Telemetry | None) -> bool:
        over = self.working_set_bytes(now) > self.capacity_bytes
        if tel is None or now - tel.at_s > STALE_S:
            return over
        evicting = tel.last_evict_at is not None and tel.last_evict_at >= now - self.window_s
        return over and tel.fill_share >= FULL_SHARE and evicting

    def admit(self, task, prompt_tokens, held_tokens, now, tel):
        self._observe(task, prompt_tokens, now)
        if self.new_chunks(prompt_tokens, held_tokens) <= self.kappa:
            return True
        return not self.under_pressure(now, tel)


class RateAdmission(Admission):
    """Token bucket: `rate_bytes_s` refill, one second of burst; chunks written while budget lasts."""

    name = "rate"
    may_decline = True

    def __init__(self, rate_bytes_s: float, chunk_bytes: int):
        self.rate = rate_bytes_s
        self.chunk_bytes = chunk_bytes
        self.burst = max(rate_bytes_s, chunk_bytes)  # one second, and never less than a chunk
        self._tokens = self.burst
        self._t = 0.0

    def select(self, candidates, now):
        if self.rate == math.inf:  # no write budget (inf + 0 * inf would be nan)
            return candidates
        self._tokens = min(self.burst, self._tokens + (now - self._t) * self.rate)
        self._t = now
        n = min(len(candidates), int(self._tokens // self.chunk_bytes))
        self._tokens -= n * self.chunk_bytes
        return candidates[:n]


class DeclineReuse:
    """Where each declined chunk is next reused, in LRU stack distance over chunk references.

    Every first lookup references its prompt's chunks (one stamp per lookup). A declined chunk's
    reuse distance is the number of distinct other chunks referenced between its decline and its
    next reference: at `capacity` or more, a tier of `capacity` chunks would have evicted it
    first. Counts: reused `within` the capacity, reused `beyond` it, and (so far) `never` reused.
    """

    def __init__(self, capacity_chunks: int):
        self.capacity = capacity_chunks
        self._last = np.full(0, -1, dtype=np.int64)  # stamp of each key's last reference
        self._declined = np.full(0, -1, dtype=np.int64)  # last stamp at decline, -1: not pending
        # keys whose last reference carries each stamp (the first `_stamps` entries are live)
        self._per_stamp = np.zeros(1024, dtype=np.int64)
        self._stamps = 0
        self.within = 0
        self.beyond = 0

    def _grow(self, keys: np.ndarray) -> None:
        n = int(keys.max()) + 1 if len(keys) else 0
        if n > len(self._last):
            k = max(n, 2 * len(self._last))
            pad = np.full(k - len(self._last), -1, dtype=np.int64)
            self._last = np.concatenate([self._last, pad])
            self._declined = np.concatenate([self._declined, pad])

    def reference(self, keys: np.ndarray) -> None:
        """A first lookup of these (distinct) chunk keys."""
        self._grow(keys)
        stamp = self._stamps
        pending = keys[self._declined[keys] >= 0]
        if len(pending):
            # distinct keys last referenced after stamp s: suffix sums of the per-stamp counts
            per = self._per_stamp[:stamp]
            after = np.concatenate([np.cumsum(per[::-1])[::-1], [0]])
            dist = after[self._declined[pending] + 1]
            beyond = int((dist >= self.capacity).sum())
            self.beyond += beyond
            self.within += len(pending) - beyond
            self._declined[pending] = -1
        old = self._last[keys]
        np.subtract.at(self._per_stamp, old[old >= 0], 1)
        self._last[keys] = stamp
        if stamp >= len(self._per_stamp):
            self._per_stamp = np.concatenate([self._per_stamp, np.zeros_like(self._per_stamp)])
        self._per_stamp[stamp] = len(keys)
        self._stamps += 1

    def declined(self, keys: np.ndarray) -> None:
        """These chunks (each referenced before) were declined now. The distance counts from
        now, where a write would have made them the tier's newest, not from their lookup: chunks
        other requests looked up in between (while this one prefilled) are not above them. A
        chunk declined again before its next lookup is one pending chunk, from its last decline."""
        self._grow(keys)
        self._declined[keys] = self._stamps - 1

    @property
    def never(self) -> int:
        return int((self._declined >= 0).sum())


def make_admission(cfg) -> Admission:
    """The admission policy of a SimConfig (explicit registry; names validated by SimConfig)."""
    if cfg.admission in ("all", "ttl"):
        a = Admission()
        a.name = cfg.admission
        return a
    if cfg.admission == "fixed":
        return FixedAdmission(cfg.kappa, cfg.chunk_tokens)
    if cfg.admission == "conditioned":
        return ConditionedAdmission(
            cfg.kappa,
            cfg.chunk_tokens,
            cfg.window_s,
            cfg.bytes_per_token,
            cfg.host_chunks * cfg.chunk_bytes,
        )
    if cfg.admission == "rate":
        return RateAdmission(cfg.rate_limit_gib_s * (1 << 30), cfg.chunk_bytes)
    raise ValueError(f"unknown admission {cfg.admission!r}")
