"""The stand-in server of the model's closed loop: what a call costs, and how the engine queues it.

`ServiceModel` prices a call (flat token rates, or per engine step with a `StepRoofline`);
`EngineQueue` makes calls wait, as an engine does, for device space before they are admitted (and
look up the caches) and for the prefill compute before they prefill. Pure: numbers in, seconds out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from replay.errors import ConfigError
from replay.model.presets import HardwarePreset, ModelPreset
from replay.trace.model import CallRef

__all__ = ["StepRoofline", "ServiceModel", "EngineQueue"]


@dataclass(frozen=True)
class StepRoofline:
    """Per-rank roofline of one engine step: max(FLOPs / FLOP/s, bytes / HBM bytes/s).

    Why the model needs it: a decode step streams the weights the batch's tokens touch (MoE: active
    parameters per token, at most all of them) plus the KV of every context in the batch, so a
    sequence decoding next to others, or with a long context, is several times slower than a lone
    sequence's weight stream. That sets how long calls stay in flight, and with it how much other
    traffic passes through the device between two calls of one task.
    """

    flops_per_s: float
    hbm_bytes_per_s: float
    linear_flops_per_token: float
    attention_flops_per_pair: float  # per (query token, context token)
    kv_bytes_per_token: float
    weight_bytes_active: float  # streamed per token
    weight_bytes_total: float  # at most this per step

    def __post_init__(self) -> None:
        for name, value in self.__dict__.items():
            if not value >= 0 or (name in ("flops_per_s", "hbm_bytes_per_s") and not value > 0):
                raise ConfigError("service model", name, f"must be positive, got {value}")

    def _step_s(self, tokens: float, flops: float, context_tokens: float) -> float:
        weights = min(self.weight_bytes_total, self.weight_bytes_active * max(1.0, tokens))
        moved = weights + context_tokens * self.kv_bytes_per_token
        return max(flops / self.flops_per_s, moved / self.hbm_bytes_per_s)

    def prefill_s(self, new_tokens: int, prefix_tokens: int = 0) -> float:
        """One pass over `new_tokens` after `prefix_tokens` cached ones (causal attention)."""
        n = float(new_tokens)
        if n <= 0:
            return 0.0
        flops = self.linear_flops_per_token * n + self.attention_flops_per_pair * (
            n * prefix_tokens + n * (n + 1) / 2
        )
        return self._step_s(n, flops, n + prefix_tokens)

    def decode_step_s(self, batch: int, context_tokens: float) -> float:
        """One decode step of `batch` sequences attending to `context_tokens` tokens in all."""
        flops = self.linear_flops_per_token * batch + self.attention_flops_per_pair * context_tokens
        return self._step_s(batch, flops, context_tokens)


@dataclass(frozen=True)
class ServiceModel:
    """How long the stand-in server takes per call: new prompt tokens at a prefill rate, then decode.

    Only the interleaving of calls matters to the cache, and that is set mostly by gaps (seconds to
    tens of seconds) and by long decodes; the defaults are a mid-size model on one modern GPU, and
    `from_presets` derives both rates from a model and hardware preset.

    With `step` (a `StepRoofline`, set by `from_presets`) a call is priced per engine step instead:
    its prefill with attention over the cached prefix, its decode as `output_tokens` steps of a
    batch. `decode_batch` says which batch: None, the calls in flight when it is sent (the closed
    loop knows them) with their contexts; k, always k sequences each as long as this call (1: a lone
    sequence, the fastest any server can decode it; the pool size: every agent decoding at once).
    """

    prefill_tokens_per_s: float = 20_000.0
    decode_tokens_per_s: float = 40.0
    step: StepRoofline | None = None
    decode_batch: int | None = None

    def __post_init__(self) -> None:
        if not (self.prefill_tokens_per_s > 0 and self.decode_tokens_per_s > 0):
            raise ConfigError("service model", "tokens_per_s", "rates must be positive")
        if self.decode_batch is not None and self.decode_batch < 1:
            raise ConfigError(
                "service model", "decode_batch", f"must be None or >= 1, got {self.decode_batch}"
            )

    @classmethod
    def from_presets(
        cls, model: ModelPreset, hardware: HardwarePreset, tp: int = 1, efficiency: float = 0.6
    ) -> ServiceModel:
        """Roofline rates: prefill at `efficiency` of peak FLOP/s (linear FLOPs only); a decode
        step streams the active weights of one rank at `efficiency` of HBM bandwidth. `step` prices
        each call per step at the same efficiency (attention, KV reads, the batch's weights)."""
        if not 0 < efficiency <= 1:
            raise ConfigError("service model", "efficiency", f"must be in (0, 1], got {efficiency}")
        prefill = hardware.peak_flops * efficiency * tp / model.linear_flops_per_token()
        weights_per_rank = model.params_active * model.dtype_bytes / tp
        decode = hardware.hbm_bytes_per_s * efficiency / weights_per_rank
        step = StepRoofline(
            flops_per_s=hardware.peak_flops * efficiency,
            hbm_bytes_per_s=hardware.hbm_bytes_per_s * efficiency,
            linear_flops_per_token=model.linear_flops_per_token() / tp,
            attention_flops_per_pair=model.attention_flops_per_context_token() / tp,
            kv_bytes_per_token=float(model.bytes_per_token(tp)),
            weight_bytes_active=weights_per_rank,
            weight_bytes_total=model.params_total * model.dtype_bytes / tp,
        )
        return cls(prefill_tokens_per_s=prefill, decode_tokens_per_s=decode, step=step)

    def with_decode_batch(self, batch: int | None) -> ServiceModel:
        return dataclasses.replace(self, decode_batch=batch)

    def prefill_s(self, new_prompt_tokens: int, prefix_tokens: int = 0) -> float:
        if self.step is not None:
            return self.step.prefill_s(new_prompt_tokens, prefix_tokens)
        return new_prompt_tokens / self.prefill_tokens_per_s

    def decode_s(
        self, output_tokens: int, context_tokens: int = 0, in_flight: Sequence[int] = ()
    ) -> float:
        """Decode time of a call with `context_tokens` of KV, sent while calls with contexts
        `in_flight` (tokens each) were running (used only with `step` and `decode_batch` None)."""
        if self.step is None:
            return output_tokens / self.decode_tokens_per_s
        if output_tokens <= 0:
            return 0.0
        if self.decode_batch is None:
            batch = 1 + len(in_flight)
            ctx = float(context_tokens + sum(in_flight))
        else:
            batch = self.decode_batch
            ctx = float(batch * context_tokens)
        # the batch's contexts grow by one token a step: price the middle step
        mid = ctx + batch * (output_tokens - 1) / 2
        return output_tokens * self.step.decode_step_s(batch, mid)


@dataclass(frozen=True, eq=False)
class EngineQueue:
    """The engine's waiting queue in the closed loop (vLLM's scheduler does the same).

    A sent call waits, first come first served, until the device holds its prompt and output
    (`prompt + output` tokens) beside the contexts of the calls already admitted; only then does it
    look up the caches, so its lookup is at admission, not at the send. Its prefill then waits for
    the prefills admitted before it (one GPU, one prefill at a time at the roofline rate);
    decodes run beside them. `prefill_tokens`: what each call computes (the model's own
    prediction at one host tier); calls not in it compute what they add to their task's previous
    call. A call larger than the device is admitted alone; `device_tokens` 0 sets no space limit
    (the model has no device tier), only the prefill line.
    """

    device_tokens: int
    prefill_tokens: Mapping[CallRef, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.device_tokens < 0:
            raise ConfigError(
                "engine queue", "device_tokens", f"must be >= 0, got {self.device_tokens}"
            )
