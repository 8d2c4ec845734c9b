"""Synthetic-trace presets: how each kind of agent behaves (log-normal lengths and gaps), every
number with the published figure it was calibrated to (`SynthPreset.sources`).

`replay.trace.synth` draws traces from them; a preset is data only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

from replay.errors import ConfigError

__all__ = ["LogNormal", "SynthPreset", "PRESETS", "get_preset"]


@dataclass(frozen=True)
class LogNormal:
    """A log-normal draw given by its median and log-space sigma, clipped to [lo, hi]."""

    median: float
    sigma: float
    lo: float
    hi: float

    def __post_init__(self) -> None:
        if not (self.median > 0 and self.sigma >= 0 and 0 <= self.lo <= self.hi):
            raise ConfigError("synth preset", "distribution", f"invalid {self!r}")

    def draw(self, rng: np.random.Generator, n: int | None = None, scale: float = 1.0):
        """`n` draws as an array (or one float when `n` is None), times `scale`."""
        raw: np.ndarray | float
        if self.sigma:
            raw = rng.lognormal(math.log(self.median), self.sigma, n)
        else:
            raw = np.full(n, self.median) if n is not None else self.median
        x = np.clip(np.asarray(raw, dtype=np.float64) * scale, self.lo * scale, self.hi * scale)
        return x if n is not None else float(x)

    def quantile(self, u: float, scale: float = 1.0) -> float:
        """The value at cumulative probability `u` (0 < u < 1), clipped like `draw`."""
        x = math.exp(math.log(self.median) + self.sigma * NormalDist().inv_cdf(u))
        return min(max(x * scale, self.lo * scale), self.hi * scale)


@dataclass(frozen=True)
class SynthPreset:
    """How one kind of agent behaves; token lengths before `scale`, times in seconds."""

    name: str
    description: str
    sources: tuple[str, ...]
    default_tasks: int
    calls_per_task: LogNormal
    first_prompt_tokens: LogNormal  # includes the shared head
    tool_result_tokens: LogNormal  # appended per turn after the previous output
    output_tokens: LogNormal
    gap_s: LogNormal  # tool run + agent work before a call
    max_context_tokens: int  # a task ends before a prompt + output would exceed this
    shared_head_tokens: int = 0
    first_gap_s: float = 0.0
    subagent_prob: float = 0.0  # chance that a task spawns a group of sub-agents once
    subagents_per_spawn: tuple[int, int] = (1, 3)
    subagent_calls: LogNormal | None = None
    subagent_first_prompt_tokens: LogNormal | None = None
    subagent_head_tokens: int = 0  # shared by every sub-agent of the trace
    # context edits: before a call, with this chance, the tool result appended `edit_back_turns`
    # calls earlier is replaced by a short placeholder, so the prompt diverges there and
    # everything after it is computed again (a history processor eliding an old observation)
    edit_prob: float = 0.0
    edit_back_turns: int = 5
    edit_placeholder_tokens: int = 16
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.default_tasks <= 0 or self.max_context_tokens <= 0 or self.shared_head_tokens < 0:
            raise ConfigError(f"synth preset {self.name}", None, "sizes must be positive")
        if not 0 <= self.subagent_prob <= 1:
            raise ConfigError(f"synth preset {self.name}", "subagent_prob", "must be in [0, 1]")
        if not 0 <= self.edit_prob <= 1 or self.edit_back_turns < 1:
            raise ConfigError(f"synth preset {self.name}", "edit_prob", "must be in [0, 1]")


PRESETS: dict[str, SynthPreset] = {
    "swe-agent": SynthPreset(
        name="swe-agent",
        description="SWE-bench coding agent (EfficientAgent study): ~4.4K calls, ~147M prompt "
        "tokens at 100 tasks; contexts from a few K to ~238K; ~97-98% of a prompt already seen; "
        "an old tool result occasionally elided (a context edit).",
        sources=(
            "EfficientAgent study, SWE-bench trajectories: 4,427 calls, 147M prompt tokens, mean "
            "prompt ~33K, contexts up to ~238K, 97-98% prompt reuse between consecutive calls",
            "EfficientAgent study, talk: at 5 GiB the median gap between one agent's turns is "
            "9.0 s, about 14x the agent's own time between calls: own time median 9.0 / 14 = "
            "0.64 s (the rest of a turn is queueing and service in the engine)",
            "shared head: SWE-agent sends every task the same system prompt and tool "
            "documentation; no published size, 2,000 tokens is an assumption kept below the "
            "smallest first prompt (2,500) so token counts do not change",
            "context edits: SWE-agent's history processors (sweagent/agent/history_processors.py, "
            "LastNObservations, n = 5 in its docs) replace an observation older than the last n "
            "by an 'Old environment output' line; the study's release counts such edits in its "
            "traces (efficientagent/analysis/trace_profile.py, a next prompt that diverges inside "
            "the current one). No published rate: 0.7% of calls is set from the study's share of "
            "newly computed KV that reappears in the next call (97.3%; 98.0% without edits)",
        ),
        default_tasks=100,
        calls_per_task=LogNormal(median=39, sigma=0.5, lo=8, hi=220),
        first_prompt_tokens=LogNormal(median=6500, sigma=0.35, lo=2500, hi=20000),
        tool_result_tokens=LogNormal(median=300, sigma=1.2, lo=20, hi=30000),
        output_tokens=LogNormal(median=260, sigma=0.6, lo=20, hi=4000),
        gap_s=LogNormal(median=0.64, sigma=0.9, lo=0.05, hi=30.0),
        max_context_tokens=238_000,
        shared_head_tokens=2_000,
        edit_prob=0.007,
        edit_back_turns=5,
    ),
    "claude-code": SynthPreset(
        name="claude-code",
        description="Claude Code sessions matched to the WEKA/AgentX statistics: median 48 "
        "requests, start ~24.8K, end ~137.5K input tokens, output P50 218, think time P50 10 s, "
        "a shared ~15K-token tools+system head, occasional parallel sub-agents.",
        sources=(
            "WEKA kv-cache-tester Claude Code traces (739 traces, 59,204 requests): requests per "
            "trace median 48; starting input median 24,775; ending input median 137,529; output "
            "per request P50 218; think time median 10 s; hash-id overlap median 96%; tools + "
            "system median ~15K tokens (../shared/traces/README.md)",
            "sub-agents (Explore/Plan) in about a quarter of the sample traces, 2-17 requests, "
            "~8.4K-token own tools+system head",
        ),
        default_tasks=50,
        calls_per_task=LogNormal(median=48, sigma=0.8, lo=3, hi=300),
        first_prompt_tokens=LogNormal(median=24_775, sigma=0.45, lo=15_500, hi=120_000),
        tool_result_tokens=LogNormal(median=760, sigma=1.3, lo=10, hi=60_000),
        output_tokens=LogNormal(median=218, sigma=1.0, lo=1, hi=16_000),
        gap_s=LogNormal(median=10.0, sigma=1.1, lo=0.5, hi=900.0),
        max_context_tokens=200_000,
        shared_head_tokens=15_000,
        subagent_prob=0.25,
        subagents_per_spawn=(1, 3),
        subagent_calls=LogNormal(median=8, sigma=0.6, lo=2, hi=20),
        subagent_first_prompt_tokens=LogNormal(median=11_700, sigma=0.1, lo=9_000, hi=16_000),
        subagent_head_tokens=8_400,
    ),
    "explainer": SynthPreset(
        name="explainer",
        description="Long conversations: start near 88K tokens, +413 output +~1K tool result a "
        "turn, short enough that five sessions still fit 180 GB of KV at 320 KiB/token at the end.",
        sources=(
            "KV-tier explainer: 180 GB holds five 88K-token sessions through a whole conversation "
            "at 320 KiB per token (180e9 / 5 / 327,680 = 109,863 tokens per session at its end); "
            "413 output tokens and ~1K tool-result tokens a turn",
        ),
        default_tasks=5,
        calls_per_task=LogNormal(median=15, sigma=0.0, lo=15, hi=15),
        first_prompt_tokens=LogNormal(median=88_000, sigma=0.01, lo=87_000, hi=89_000),
        tool_result_tokens=LogNormal(median=1000, sigma=0.3, lo=300, hi=1500),
        output_tokens=LogNormal(median=413, sigma=0.0, lo=413, hi=413),
        gap_s=LogNormal(median=5.0, sigma=0.8, lo=0.5, hi=60.0),
        max_context_tokens=109_863,
    ),
}


def get_preset(name: str) -> SynthPreset:
    """The preset called `name`; an unknown name raises ConfigError listing the valid ones."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(
            "synth", "preset", f"unknown preset {name!r}; valid: {', '.join(sorted(PRESETS))}"
        ) from None
