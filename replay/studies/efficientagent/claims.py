"""The EfficientAgent study's published claims, each written once as data.

Each `Claim` holds what the study said and where, the number it printed (minutes, GiB per
tensor-parallel rank, tokens, fractions), the measure that gives ours, and its role (input,
outcome, self-consistency). No claim carries a tolerance of its own: `rule.judge` applies one
rule to all. Nothing here is measured by us.
"""

from __future__ import annotations

import math

from replay.studies.efficientagent import measures as m
from replay.studies.efficientagent import measures_other as mo
from replay.studies.efficientagent.rule import Claim, Role

__all__ = ["STUDY", "CLAIMS", "claim"]

STUDY = (
    "EfficientAgent study: H20, Qwen3-Coder-30B-A3B-Instruct BF16, TP8, 16 SWE-agent tasks at "
    "once, vLLM + LMCache with a host KV tier per rank"
)


_TRACE = "study, trace"
_SWEV = "study, SWE-bench Verified traces"
_TALK = "study, talk"  # the talk's time stamps are not recorded in this repository
_H20 = "study, H20 sweep (16 agents, host tier per rank)"
_MODEL = "study, working-set model predictions before the runs"
_ADM = "study, admission experiments (fixed write filter, capacity-conditioned admission)"
_POOL8 = "study, 8-agent runs"
_HW = "study, hardware comparison"
_WORKLOAD, _PRESSURE, _5, _20 = "workload", "pressure", "5 GiB", "20 GiB"
_PRED, _ADMISSION, _P8, _HARDWARE = "predictions", "admission", "pool 8", "hardware"
IN, OUT, SELF = Role.INPUT, Role.OUTCOME, Role.SELF

CLAIMS: tuple[Claim, ...] = (
    # The workload: what the swe-agent preset was calibrated to (inputs, not counted)
    Claim("calls", _WORKLOAD, "calls in the trace", 4427, "count", _TRACE,
          m.fact("calls", "count"), IN),
    Claim("prompt_tokens", _WORKLOAD, "prompt tokens", 147e6, "tokens", _TRACE,
          m.fact("prompt_tokens"), IN),
    Claim("max_context", _WORKLOAD, "largest context", 238e3, "tokens", _TRACE,
          m.fact("max_context"), IN,
          note="the preset caps contexts at 238K, but no task of the 100 drawn grows past ~142K: "
          "a log-normal count of calls per task cannot give both the mean prompt and a 238K "
          "longest context (see Synthetic trace)"),
    Claim("reuse", _WORKLOAD, "prompt reused from the previous call", 0.981, "fraction", _SWEV,
          m.fact("reuse", "pct"), IN,
          note="longest common prefix with the previous call's context"),
    Claim("reappears", _WORKLOAD, "newly computed KV that reappears in the next call", 0.973,
          "fraction", _TRACE, m.fact("reappears", "pct"), IN,
          note="the preset's context-edit rate (0.7% of calls) is set from this; without edits "
          "only a task's last call loses its new KV (98.0%)"),
    Claim("turn_gap_5", _WORKLOAD, "median gap between one agent's turns at 5 GiB, about 14x "
          "the agent's own time between calls", 9.0, "s", _TALK, m.turn_gap_5, IN,
          note="the preset's own time between calls (median 0.64 s) is set from this: 9.0 s / 14. "
          "Our turn is mostly a wait for the other agents' prefills (see Turn gap below)"),
    Claim("working_set", _PRESSURE, "reuse working set per rank", 11.4, "GiB", _H20,
          m.working_set, IN, note="(A-1)·N̄·β on the trace"),
    Claim("pressure_5", _PRESSURE, "pressure at 5 GiB", 2.3, "ratio", _H20, m.pressure(5), IN),
    Claim("pressure_10", _PRESSURE, "pressure at 10 GiB", 1.1, "ratio", _H20, m.pressure(10), IN),
    Claim("pressure_20", _PRESSURE, "pressure at 20 GiB", 0.57, "ratio", _H20, m.pressure(20),
          IN),
    Claim("ws_64x64k", _PRESSURE, "64 agents x 64K tokens need per rank", 94.5, "GiB", _TALK,
          mo.working_set_64x64k, IN, note="arithmetic: 63 x 65,536 x 24,576 bytes"),
    Claim("pool8_working_set", _P8, "working set with 8 agents", 5.3, "GiB", _POOL8,
          mo.pool8_working_set, IN),
    Claim("cpb_rtx-3090", _HARDWARE, "compute per host-link byte, RTX 3090", 2.2e3, "count", _HW,
          mo.compute_per_byte("rtx-3090"), IN, note="preset"),
    Claim("cpb_h20", _HARDWARE, "compute per host-link byte, H20", 2.3e3, "count", _HW,
          mo.compute_per_byte("h20"), IN, note="preset"),
    Claim("cpb_h800", _HARDWARE, "compute per host-link byte, H800", 15.5e3, "count", _HW,
          mo.compute_per_byte("h800"), IN, note="preset"),
    Claim("load_vs_recompute_h20", _HARDWARE, "on H20 loading is over 6x cheaper than "
          "recomputing (benefit-ratio lower bound 0.84)", (6.0, math.inf), "x", _TALK,
          mo.load_vs_recompute("h20"), IN,
          note="ours: the cost model's weight FLOPs only; the study's 6x is a lower bound"),
    # Under pressure: 5 GiB (outcomes)
    Claim("makespan_5", _5, "makespan at 5 GiB / no offload (209 vs 212 min)", 209 / 212,
          "ratio", _H20, m.makespan_ratio(5), null=1.0),
    Claim("write_read_5", _5, "tokens written per token restored", 6.5, "ratio", _H20,
          m.mean_at_5("write_read_ratio", percent=False)),
    Claim("evicted_unread_5", _5, "chunks written then evicted before the next call", 0.792,
          "fraction", _H20, m.mean_at_5("evicted_unread_fraction", percent=True),
          note="ours: evicted before ever being restored (the study: before the next call)"),
    # Above the working set
    Claim("makespan_20", _20, "makespan at 20 GiB / no offload (128 vs 212 min)", 128 / 212,
          "ratio", _H20, m.makespan_ratio(20), null=1.0),
    Claim("prefill_20", _20, "computed prefill change at 20 GiB", -0.93, "fraction", _H20,
          m.prefill_change_20, null=0.0),
    Claim("flat_past_20", _20, "flat past 20 GiB (computed prefill at 40 GiB vs 20 GiB)", 0.0,
          "fraction", _H20, m.flat_past_20, null=0.0),
    Claim("repeat_spread_40", _20, "repeated 40 GiB runs (124.0, 115.9, 123.7 min): about a 7 "
          "percent spread", 0.07, "fraction", _H20, m.repeat_spread_40),
    Claim("makespan_tracks_prefill", _20, "across 17 runs makespan tracks computed prefill",
          None, "", _TALK, m.makespan_tracks_prefill,
          note="holds when r >= 0.9 between makespan and computed prefill over every distinct "
          "run (the 0 GiB runs once: without a tier every admission gives the same run)"),
    Claim("prefix_caching", _20, "prefix caching alone makes runs up to 11.1x faster", 11.1,
          "x", _TALK, mo.prefix_caching_speedup, null=1.0,
          note="paper-prefix: makespan with device prefix caching off over on, no host tier, at "
          "the paper-h20 setting; the study's 'up to' is its largest, over settings not published"),
    # Write admission (relative changes against plain offload at the same tier)
    Claim("fixed_prefill_5", _ADMISSION, "fixed filter: computed prefill at 5 GiB", -0.36,
          "fraction", _ADM, m.policy_change("computed_prefill_tokens", 5, "fixed"), null=0.0),
    Claim("fixed_prefill_40", _ADMISSION, "fixed filter: computed prefill at 40 GiB (x plain)",
          4.3, "x", _ADM,
          m.policy_change("computed_prefill_tokens", 40, "fixed", as_ratio=True), null=1.0),
    Claim("fixed_makespan_40", _ADMISSION, "fixed filter: makespan at 40 GiB (124 -> 162 min)",
          162 / 124 - 1, "fraction", _ADM, m.policy_change("makespan_s", 40, "fixed"), null=0.0),
    Claim("cond_prefill_5", _ADMISSION, "conditioned: computed prefill at 5 GiB", -0.35,
          "fraction", _ADM, m.policy_change("computed_prefill_tokens", 5, "conditioned"),
          null=0.0),
    Claim("cond_prefill_40", _ADMISSION, "conditioned: computed prefill at 40 GiB vs plain", 0.0,
          "fraction", _ADM, m.policy_change("computed_prefill_tokens", 40, "conditioned"),
          null=0.0),
    Claim("cond_makespan_5", _ADMISSION, "conditioned: makespan gain at 5 GiB", -0.104,
          "fraction", _ADM, m.policy_change("makespan_s", 5, "conditioned"), null=0.0),
    Claim("cond_makespan_10", _ADMISSION,
          "conditioned: makespan at 10 GiB (161 -> 157 min, within noise)", 157 / 161 - 1,
          "fraction", _ADM, m.policy_change("makespan_s", 10, "conditioned"), null=0.0),
    Claim("declined_5", _ADMISSION, "writes declined at 5 GiB (any kappa 2-16)", (0.90, 1.0),
          "fraction", _ADM, m.declined_5),
    Claim("evicted_anyway_5", _ADMISSION, "Proposition 1: declined chunks that would have been "
          "evicted before reuse anyway, 5 GiB", (0.84, 0.85), "fraction", _TALK,
          m.evicted_anyway(5),
          note="ours: stack distance to the next reuse >= the tier's chunks, or never reused"),
    Claim("evicted_anyway_40", _ADMISSION, "Proposition 1: the same share at 40 GiB", 0.048,
          "fraction", _TALK, m.evicted_anyway(40)),
    # Eight agents
    Claim("pool8_3gib", _P8, "a 3 GiB tier already recovers prefixes", None, "", _POOL8,
          mo.pool8_3gib, note="holds when at least half of the recompute is gone"),
    Claim("pool8_makespan", _P8, "halving the pool: recompute makespan change", -0.248,
          "fraction", _POOL8, mo.pool8_makespan, null=0.0,
          note="no-offload makespan, pool 8 vs pool 16 (same tasks)"),
    # Hardware: paper-hardware
    Claim("offload_rtx-3090", _HARDWARE, "offload makespan ratio, RTX 3090", 0.91, "ratio", _TALK,
          mo.offload_ratio("rtx-3090"), null=1.0,
          note="best tier above the working set vs no tier; copies cost their bytes and stall "
          "the engine step (LMCache's synchronous loads and stores); the card's step budget is "
          "vLLM 0.13.0's default for it, 2,048 tokens (8,192 on the H20 and H800)"),
    Claim("offload_h20", _HARDWARE, "offload makespan ratio, H20", 0.60, "ratio", _TALK,
          mo.offload_ratio("h20"), null=1.0, note="best tier above the working set vs no tier"),
    Claim("offload_h800", _HARDWARE, "offload on H800: slower in every run by", (0.08, 0.87),
          "fraction", _HW, mo.offload_h800, null=0.0,
          note="judged on the smallest change over the tiers swept (the study: every run slower). "
          "A restore's bytes cost less than recomputing them even at 15.5K FLOP/byte; only an "
          "undersized tier's synchronous stores make offload lose"),
    Claim("offload_split", _HARDWARE,
          "offload loses on H800, pays on H20 and RTX 3090 (model, TP, memory fraction and GPU "
          "KV size also differ between the cards)", None, "", _HW, mo.offload_split,
          note="holds when the H800 loses at every tier swept and the others gain at their best. "
          "Ours: same model, TP and device KV on every card (the study's differ), tiers below "
          "(5 GiB) and above (20, 40 GiB) the working set"),
    # Context folding
    Claim("folding_hit", "folding", "prefix hit rate with context folding (96.5% without)",
          (0.51, 0.61), "fraction", "study, context folding on an RTX 3090", mo.folding_hit,
          note="hit rate = (device hits + restores) / prompt tokens"),
    # Self-consistency: the study's model against its runs; ours against our simulator
    Claim("pred_prefill_20", _PRED, "model error, computed prefill at 20 GiB (predicted "
          "5.19M-5.78M, measured 5.28M)", (5.19 / 5.28 - 1, 5.78 / 5.28 - 1), "fraction",
          _MODEL, m.prediction(20, "computed_prefill_tokens"), SELF),
    Claim("pred_restores_10", _PRED, "model error, restores at 10 GiB (low by 11-18%)",
          (-0.18, -0.11), "fraction", _MODEL, m.prediction(10, "host_restore_tokens"), SELF),
)  # fmt: skip


def claim(key: str) -> Claim:
    """The published claim called `key`."""
    for c in CLAIMS:
        if c.key == key:
            return c
    raise KeyError(key)
