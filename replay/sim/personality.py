"""Engine personalities: whose cache the simulator imitates.

- `reference`: the simulator's own vLLM-like model (docs/simulator.md): a block LRU device tier
  freed tail first, chunked prefill, and the chunked host tier with write and admission policies.
- `vllm`: the reference device tier with vLLM's accounting: one block of the pool is the null
  block (never holds KV), so a pool of N blocks caches N - 1. vLLM's own block manager also
  frees tail first, keeps only full blocks and recomputes the last token of a fully cached prompt,
  all of which the reference already does.
- `llamacpp`: llama.cpp's server: `max_num_seqs` slots each holding the last sequence it served,
  and the `--cache-ram` tier storing and restoring whole prompts, LRU by bytes
  (`replay.model.wholeprompt`, whose rules were checked call by call against the real server).
  Generated tokens are the server's own, so they never match a later prompt. The device blocks
  only budget the slots' memory; nothing is shared through them.

Pure: `SlotPersonality` keeps no time of its own beyond the release times it is given.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from replay.model.wholeprompt import WholePromptCache, WholePromptConfig
from replay.sim.options import SimConfig

__all__ = [
    "SlotPersonality",
    "SlotAdmission",
    "cache_ram_mib",
    "STATE_META_BYTES_PER_TOKEN",
    "STATE_OVERHEAD_BYTES",
]

# A saved llama.cpp slot state stores, beside the KV, each cell's position and sequence ids (12
# bytes a token) and 64 bytes of headers: what the server's eviction log reports for the tiny model.
STATE_META_BYTES_PER_TOKEN = 12
STATE_OVERHEAD_BYTES = 64


@dataclass(frozen=True)
class SlotAdmission:
    slot: int
    device_hit_tokens: int  # reused from the slot's own sequence
    host_restore_tokens: int  # reused from a RAM entry moved into the slot


def cache_ram_mib(cfg: SimConfig) -> int:
    """`--cache-ram` in MiB: `cache_ram_mib` when given, else from the host tier size (sweeps
    give `host_tier_gib` = MiB / 1024)."""
    if cfg.cache_ram_mib is not None:
        return cfg.cache_ram_mib
    return int(round(cfg.host_tier_gib * 1024))


class SlotPersonality:
    """llama.cpp's slots and RAM tier inside the simulator: `admit` a request, `release` its slot."""

    def __init__(self, cfg: SimConfig):
        self.cache = WholePromptCache(
            WholePromptConfig(
                slots=cfg.max_num_seqs,
                cache_ram_mib=cache_ram_mib(cfg),
                bytes_per_token=float(cfg.bytes_per_token + STATE_META_BYTES_PER_TOKEN),
                entry_overhead_bytes=STATE_OVERHEAD_BYTES,
            )
        )

    def admit(self, prompt_ids: np.ndarray) -> SlotAdmission | None:
        """Take an idle slot for the prompt (None: every slot is busy, the request waits)."""
        if not self.cache.can_admit():
            return None
        a = self.cache.admit(prompt_ids)
        from_ram = a.source == "ram"
        return SlotAdmission(
            a.slot, 0 if from_ram else a.cached_tokens, a.cached_tokens if from_ram else 0
        )

    def release(self, slot: int, prompt_ids: np.ndarray, output_tokens: int, t: float) -> None:
        self.cache.release(slot, prompt_ids, output_tokens, t)

    def host_counters(self) -> dict[str, int]:
        """RAM-tier tokens written and evicted (whole entries)."""
        t = self.cache.totals
        return {
            "host_write_tokens": t.host_write_tokens,
            "host_evicted_tokens": t.host_evicted_tokens,
        }

    def clear(self) -> None:
        """Drop the RAM entries and the idle slots' sequences (a prefix-cache reset)."""
        c = self.cache
        while c.entries:
            c._remove(c.entries[0])
        for s in c.slots:
            if not s.busy:
                s.seq = None
