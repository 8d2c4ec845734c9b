"""Per-card defaults for the step token budget and the seat count, as a vLLM server picks them.

A vLLM server launched without `--max-num-batched-tokens` and `--max-num-seqs` does not use one
budget everywhere: it sizes both from the card it runs on. The EfficientAgent study serves its
three cards that way: its release's `examples/run_replay.sh` sets no budget (its README's
`--max-num-seqs 16` and the seat counts below alike never bind with 16 agents), so a simulated
card must follow the same rule to be served as the study served it.

The rule, from vLLM 0.13.0 (the study's pinned version), `vllm/engine/arg_utils.py`,
`EngineArgs.get_batch_defaults` and `_set_default_max_num_seqs_and_batched_tokens_args`, for the
OpenAI API server (`UsageContext.OPENAI_API_SERVER`, what `vllm serve` runs):

- the card's total memory is `current_platform.get_device_total_memory()` (NVML's total, in
  bytes: `vllm/platforms/cuda.py`); a card with at least 70 GiB (`70 * GiB_bytes`,
  `GiB_bytes = 1 << 30` in `vllm/utils/mem_constants.py`) whose name does not contain "a100"
  gets 8,192 tokens a step and 1,024 seats;
- any other card (less memory, or an A100 of any size: larger budgets cost A100s throughput)
  gets 2,048 tokens and 256 seats;
- then seats = min(seats, budget), and with chunked prefill on (vLLM's default for generative
  models) budget = min(budget, seats * max_model_len). Neither binds for these values.

A preset's memory is its datasheet figure in decimal GB; NVML reports the card's binary size (a
"24 GB" RTX 3090 shows 24,576 MiB), at most 2^30 / 10^9 - 1 = 7.4% more. So only a preset between
70 GiB / 1.074 (65.2 GiB) and 70 GiB could land on the other side of vLLM's line, and none does
(a test checks), so each card falls on the side vLLM picks.
"""

from __future__ import annotations

from replay.errors import ConfigError
from replay.model.presets import GIB, HardwarePreset

__all__ = ["BATCH_DEFAULTS", "VLLM_LARGE_CARD_BYTES", "vllm_0_13_api_server", "batch_defaults_for"]

# vLLM 0.13.0, get_batch_defaults: `device_memory >= 70 * GiB_bytes and "a100" not in device_name`
VLLM_LARGE_CARD_BYTES = 70 * GIB


def vllm_0_13_api_server(card: HardwarePreset) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) vLLM 0.13.0's API server defaults to on `card`:
    (8192, 1024) when memory_bytes >= 70 GiB and the name has no "a100", else (2048, 256)."""
    if card.memory_bytes >= VLLM_LARGE_CARD_BYTES and "a100" not in card.name.lower():
        budget_tokens, seats = 8192, 1024
    else:
        budget_tokens, seats = 2048, 256
    return budget_tokens, min(seats, budget_tokens)


# Explicit registry: the value of `batch_defaults` -> the rule. "" keeps the values given.
BATCH_DEFAULTS = {"vllm-0.13.0": vllm_0_13_api_server}


def batch_defaults_for(rule: str, card: HardwarePreset) -> tuple[int, int]:
    """The (token budget, seats) rule `rule` gives on `card`; ConfigError naming the valid rules."""
    try:
        fn = BATCH_DEFAULTS[rule]
    except KeyError:
        valid = ", ".join(sorted(BATCH_DEFAULTS))
        raise ConfigError(
            "sim options", "--batch-defaults", f"unknown rule {rule!r}; valid: {valid}"
        ) from None
    return fn(card)
