"""Working-set model of llama.cpp's RAM prompt cache (`--cache-ram`): whole-prompt entries.

The tier's semantics, as the server implements them (llama.cpp `tools/server`, late 2026):
- Each of `slots` slots keeps the KV of its last sequence: prompt + generated tokens but the last.
- A request takes the idle slot whose sequence shares the largest fraction of the new prompt
  (common prefix / prompt > `similarity`, 0.1); else the least recently released idle slot. With no
  idle slot it waits for one.
- If the slot was chosen by LRU, or keeps under half of its own sequence, the cache is updated: the
  slot's sequence is saved as an entry (unless an entry already contains it; entries it contains are
  dropped; the oldest entries are evicted until it fits in `cache_ram_bytes`; one larger than the
  whole cache is not saved), then the entry that keeps >= 1/4 of itself and beats the slot on both
  kept fractions is moved (not copied) into the slot.
- The reused prefix is the common prefix of the slot's sequence and the prompt, one token short
  when it covers the whole prompt (the server always computes one token).
- After a request starts, every idle slot's sequence is saved too (`--cache-idle-slots`, default
  on), so RAM holds copies of what the slots hold.
- An entry costs `tokens * bytes_per_token + entry_overhead_bytes` (a saved sequence state: KV and
  per-cell metadata).

Generated tokens are the server's own (llama.cpp cannot force recorded ids), so they never match
the next prompt: a task's next call reuses at most its previous prompt.

The model is pure: the caller admits and releases prompts in its own order.
`replay.model.wholeprompt` replays a given call order through it, and `replay.model.wholeprompt_loop`
adds the closed loop in virtual time and the sweep predictions.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass

import numpy as np

from replay.errors import ConfigError

__all__ = ["MIB", "WholePromptConfig", "Admission", "Totals", "WholePromptCache"]

MIB = 1 << 20


@dataclass(frozen=True)
class WholePromptConfig:
    """One server configuration. `cache_ram_mib` 0 disables the tier, -1 means no size limit (the
    server then caps the tier at `ctx_tokens` tokens)."""

    slots: int
    cache_ram_mib: int
    bytes_per_token: float
    entry_overhead_bytes: float = 0.0
    ctx_tokens: int = 0
    similarity: float = 0.1
    cache_idle_slots: bool = True

    def __post_init__(self) -> None:
        def bad(f: str, why: str) -> ConfigError:
            return ConfigError("wholeprompt model", f, why)

        if not isinstance(self.slots, int) or self.slots < 1:
            raise bad("slots", f"must be an integer >= 1, got {self.slots!r}")
        if not isinstance(self.cache_ram_mib, int) or self.cache_ram_mib < -1:
            raise bad("cache_ram_mib", f"must be an integer >= -1, got {self.cache_ram_mib!r}")
        if not self.bytes_per_token > 0:
            raise bad("bytes_per_token", f"must be > 0, got {self.bytes_per_token!r}")
        if not self.entry_overhead_bytes >= 0:
            raise bad("entry_overhead_bytes", f"must be >= 0, got {self.entry_overhead_bytes!r}")
        if self.ctx_tokens < 0:
            raise bad("ctx_tokens", f"must be >= 0, got {self.ctx_tokens!r}")
        if not 0 <= self.similarity < 1:
            raise bad("similarity", f"must be in [0, 1), got {self.similarity!r}")

    @property
    def enabled(self) -> bool:
        return self.cache_ram_mib != 0

    @property
    def limit_bytes(self) -> int:
        return max(self.cache_ram_mib, 0) * MIB


@dataclass(frozen=True, eq=False)
class _Seq:
    """A KV sequence: prompt ids, then `n_gen` generated tokens that only their own copies match."""

    prompt: np.ndarray
    gen_id: int
    n_gen: int

    def __len__(self) -> int:
        return len(self.prompt) + self.n_gen


def _lcp_arrays(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


def _lcp_seq(a: _Seq, b: _Seq) -> int:
    n = _lcp_arrays(a.prompt, b.prompt)
    if n == len(a.prompt) == len(b.prompt) and a.gen_id == b.gen_id:
        n += min(a.n_gen, b.n_gen)
    return n


@dataclass
class _Slot:
    id: int
    seq: _Seq | None = None
    busy: bool = False
    t_last_used: float = -1.0


@dataclass(frozen=True)
class Admission:
    """Where one request went and what it reused: `source` is "slot", "ram" or None (nothing)."""

    slot: int
    cached_tokens: int
    source: str | None
    prompt_tokens: int

    @property
    def computed_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens


@dataclass
class Totals:
    """Token counters of a whole run, in the canonical names (restores = RAM-sourced reuse)."""

    calls: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    device_hit_tokens: int = 0
    host_restore_tokens: int = 0
    computed_prefill_tokens: int = 0
    host_write_tokens: int = 0
    host_evicted_tokens: int = 0
    peak_cache_bytes: int = 0

    def to_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


class WholePromptCache:
    """The server's slots and RAM entry list. `admit` a prompt, later `release` its slot.

    Invariants (checked after every step): the RAM list never exceeds its byte limit, a busy slot
    is never chosen, and counters never go negative.
    """

    def __init__(self, config: WholePromptConfig):
        self.config = config
        self.slots = [_Slot(i) for i in range(config.slots)]
        self.entries: deque[_Seq] = deque()
        self._bytes = 0
        self._gen_ids = itertools.count(1)
        self.totals = Totals()

    # --- RAM list -------------------------------------------------------------------------

    def _size(self, seq: _Seq) -> int:
        # Whole bytes, as the server sizes a saved state; the running total then stays exact over
        # any number of saves and evictions, where a float sum drifts by ulps.
        return round(len(seq) * self.config.bytes_per_token + self.config.entry_overhead_bytes)

    def _pop_oldest(self) -> None:
        old = self.entries.popleft()
        self._bytes -= self._size(old)
        self.totals.host_evicted_tokens += len(old)

    def _remove(self, seq: _Seq) -> None:
        self.entries.remove(seq)
        self._bytes -= self._size(seq)

    @property
    def cache_bytes(self) -> int:
        return self._bytes

    def _save(self, seq: _Seq | None) -> bool:
        """Copy a slot's sequence into RAM (the server's alloc); False when nothing was added."""
        if seq is None or len(seq) == 0:
            return False
        if any(_lcp_seq(e, seq) == len(seq) for e in self.entries):
            return False
        size = self._size(seq)
        limit = self.config.limit_bytes
        if limit > 0 and size > limit:
            return False
        for e in [e for e in self.entries if _lcp_seq(e, seq) == len(e)]:
            self._remove(e)  # an older prefix of this sequence: superseded, not evicted
        while limit > 0 and self.entries and self._bytes + size > limit:
            self._pop_oldest()
        self.entries.append(seq)
        self._bytes += size
        self.totals.host_write_tokens += len(seq)
        self.totals.peak_cache_bytes = max(self.totals.peak_cache_bytes, int(self._bytes))
        return True

    def _trim(self) -> None:
        """The server's update(): size limit, then the token limit (binding only without a size limit)."""
        limit = self.config.limit_bytes
        while limit > 0 and self.entries and self._bytes > limit:
            self._pop_oldest()
        limit_tokens = self.config.ctx_tokens
        if limit_tokens <= 0:
            return
        n_tokens = sum(len(e) for e in self.entries)
        per_token = max(1.0, self._bytes / max(1, n_tokens))
        cap = max(limit_tokens, int(limit / per_token)) if limit > 0 else limit_tokens
        while self.entries and n_tokens > cap:
            n_tokens -= len(self.entries[0])
            self._pop_oldest()

    def _load(self, slot: _Slot, prompt: np.ndarray) -> bool:
        """Move the best entry for `prompt` into `slot` (the server's load); True if one moved."""
        own = slot.seq
        lcp = _lcp_arrays(own.prompt, prompt) if own is not None else 0
        keep_best = lcp / len(own) if own is not None and len(own) else -1.0
        sim_best = lcp / len(prompt)
        best = None
        for e in self.entries:
            lcp_e = _lcp_arrays(e.prompt, prompt)
            keep, sim = lcp_e / len(e), lcp_e / len(prompt)
            if keep < 0.25:
                continue
            if keep_best < keep and sim_best < sim:
                keep_best, sim_best, best = keep, sim, e
        if best is None:
            return False
        self._remove(best)
        slot.seq = best
        return True

    # --- requests -------------------------------------------------------------------------

    def _choose(self, prompt: np.ndarray) -> tuple[_Slot | None, bool]:
        chosen, best = None, 0.0
        if self.config.similarity != 0:
            for s in self.slots:
                if s.busy or s.seq is None or len(s.seq) == 0:
                    continue
                sim = _lcp_arrays(s.seq.prompt, prompt) / len(prompt)
                if sim > best and sim > self.config.similarity:
                    chosen, best = s, sim
            if chosen is not None and chosen.seq is not None:
                keep = best * len(prompt) / len(chosen.seq)
                return chosen, keep < 0.5
        # The server stamps each release with the wall clock, slot by slot in index order, so slots
        # freed by one step (equal times here) count as released in index order; never-used slots
        # tie, and its `<=` takes the last of them.
        t_last: tuple[float, int] = (-1.0, 0)
        for s in self.slots:
            if s.busy:
                continue
            key = (s.t_last_used, s.id if s.t_last_used >= 0 else 0)
            if chosen is None or key <= t_last:
                chosen, t_last = s, key
        return chosen, chosen is not None

    def can_admit(self) -> bool:
        return any(not s.busy for s in self.slots)

    def admit(self, prompt: np.ndarray) -> Admission:
        """Start a request for `prompt` (int token ids); raises if no slot is idle (call can_admit)."""
        if len(prompt) == 0:
            raise ConfigError("wholeprompt model", "prompt", "empty prompts are not served")
        slot, update = self._choose(prompt)
        if slot is None:
            raise ConfigError("wholeprompt model", "slots", "no idle slot: wait for a release")
        loaded = False
        if update and self.config.enabled:
            self._save(slot.seq)
            loaded = self._load(slot, prompt)
            self._trim()
        cached = _lcp_arrays(slot.seq.prompt, prompt) if slot.seq is not None else 0
        if cached == len(prompt):
            cached -= 1
        source = None if cached == 0 else ("ram" if loaded else "slot")
        slot.busy = True
        slot.seq = None
        if self.config.enabled and self.config.cache_idle_slots:
            for s in self.slots:
                if not s.busy and self._save(s.seq):
                    self._trim()
        t = self.totals
        t.calls += 1
        t.prompt_tokens += len(prompt)
        t.cached_tokens += cached
        t.computed_prefill_tokens += len(prompt) - cached
        if source == "ram":
            t.host_restore_tokens += cached
        elif source == "slot":
            t.device_hit_tokens += cached
        self._check()
        return Admission(slot.id, cached, source, len(prompt))

    def release(self, slot: int, prompt: np.ndarray, output_tokens: int, t: float) -> None:
        """End the request on `slot`: it now holds `prompt` + all generated tokens but the last."""
        s = self.slots[slot]
        if not s.busy:
            raise ConfigError("wholeprompt model", "slot", f"slot {slot} is not busy")
        s.busy = False
        s.seq = _Seq(prompt, next(self._gen_ids), max(output_tokens - 1, 0))
        s.t_last_used = t

    def _check(self) -> None:
        limit = self.config.limit_bytes
        if limit > 0 and self._bytes > limit + 1e-6:
            raise AssertionError(f"RAM tier holds {self._bytes} bytes over its {limit} limit")
        if min(self.totals.to_dict().values()) < 0:
            raise AssertionError("negative counter")
