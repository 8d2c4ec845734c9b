"""Canonical counter names: the per-run numbers every engine's metrics are mapped onto.

One vocabulary for the engine adapters (which map Prometheus samples onto these names), the
simulator (which counts them directly), the summaries and the analysis. A counter an engine does
not expose is None, never 0.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "PROMPT_TOKENS",
    "OUTPUT_TOKENS",
    "DEVICE_HIT_TOKENS",
    "HOST_RESTORE_TOKENS",
    "COMPUTED_PREFILL_TOKENS",
    "HOST_WRITE_TOKENS",
    "HOST_EVICTED_TOKENS",
    "PREEMPTIONS",
    "CANONICAL_COUNTERS",
    "Samples",
]

PROMPT_TOKENS = "prompt_tokens"
OUTPUT_TOKENS = "output_tokens"
DEVICE_HIT_TOKENS = "device_hit_tokens"  # prompt tokens whose KV was already on the device
HOST_RESTORE_TOKENS = "host_restore_tokens"  # prompt tokens loaded back from the host tier
COMPUTED_PREFILL_TOKENS = "computed_prefill_tokens"  # prompt tokens the engine had to compute
HOST_WRITE_TOKENS = "host_write_tokens"
HOST_EVICTED_TOKENS = "host_evicted_tokens"
PREEMPTIONS = "preemptions"

# Canonical per-run counters (deltas between the scrape at replay start and at replay end).
CANONICAL_COUNTERS = (
    PROMPT_TOKENS,
    OUTPUT_TOKENS,
    DEVICE_HIT_TOKENS,
    HOST_RESTORE_TOKENS,
    COMPUTED_PREFILL_TOKENS,
    HOST_WRITE_TOKENS,
    HOST_EVICTED_TOKENS,
    PREEMPTIONS,
)

# Parsed metrics: {sample name: {sorted (label, value) pairs: cumulative value}} (replay.metrics).
Samples = Mapping[str, Mapping[tuple, float]]
