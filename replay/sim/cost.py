"""Roofline cost model: step times from FLOPs and bytes moved, transfers over the host link.

Pure. A step's time is max(FLOPs / (peak * eff), bytes / (HBM * eff)) per rank, plus a fixed
overhead. FLOPs: 2 per active parameter per token (linear) plus, when enabled, 4 * layers * q_heads *
head_dim per (query token, context token) pair (QK^T and AV; causal within a prefill chunk). Bytes:
the weights a step streams (MoE: active parameters per token, at most all of them) plus the KV read.
All quantities are per rank: FLOPs and weights split over `tp` ranks, KV bytes per rank per token.
A host-link transfer costs its bytes at `link_efficiency` of the link's one-direction bandwidth plus
`transfer_overhead_s` per chunk moved (the fixed cost of one chunk's lookup, allocation and copy).
"""

from __future__ import annotations

import numba
import numpy as np

from replay.model.presets import HardwarePreset, ModelPreset

__all__ = ["CostModel"]


class CostModel:
    def __init__(
        self,
        model: ModelPreset,
        hardware: HardwarePreset,
        tp: int,
        efficiency: float = 1.0,
        attention_flops: bool = True,
        step_overhead_s: float = 0.0,
        link_efficiency: float = 1.0,
        transfer_overhead_s: float = 0.0,
    ):
        self.model = model
        self.hw = hardware
        self.tp = tp
        self.flops_s = hardware.peak_flops * efficiency
        self.hbm_s = hardware.hbm_bytes_per_s * efficiency
        self.link_s = hardware.host_link_bytes_per_s * link_efficiency
        self.transfer_overhead_s = transfer_overhead_s
        self.overhead_s = step_overhead_s
        self.lin = model.linear_flops_per_token() / tp
        self.attn = model.attention_flops_per_context_token() / tp if attention_flops else 0.0
        self.kv_bytes_per_token = model.bytes_per_token(tp)
        self.w_active = model.params_active * model.dtype_bytes / tp
        self.w_total = model.params_total * model.dtype_bytes / tp

    def weight_bytes(self, n_tokens: int) -> float:
        """Weight bytes a step of `n_tokens` tokens streams per rank."""
        return min(self.w_total, self.w_active * max(1, n_tokens))

    def prefill_flops(self, n_tokens: int, prefix_tokens: int) -> float:
        """FLOPs per rank to compute `n_tokens` new tokens after `prefix_tokens` cached ones."""
        n = float(n_tokens)
        return self.lin * n + self.attn * (n * prefix_tokens + n * (n + 1) / 2)

    def step_s(self, chunks: list[tuple[int, int]], n_decode: int, decode_ctx_tokens: int) -> float:
        """Duration of one step: prefill chunks (new tokens, prefix tokens) + `n_decode` decodes
        attending to `decode_ctx_tokens` context tokens in total."""
        flops = self.lin * n_decode + self.attn * decode_ctx_tokens
        kv = decode_ctx_tokens
        n_tok = n_decode
        for n, p in chunks:
            flops += self.prefill_flops(n, p)
            kv += n + p
            n_tok += n
        by = self.weight_bytes(n_tok) + kv * self.kv_bytes_per_token
        return max(flops / self.flops_s, by / self.hbm_s) + self.overhead_s

    def decode_steps_s(self, n_decode: int, ctx_tokens: int, steps: int) -> np.ndarray:
        """Durations of `steps` consecutive decode-only steps; context grows by n_decode a step."""
        ctx = ctx_tokens + n_decode * np.arange(steps, dtype=np.float64)
        flops = self.lin * n_decode + self.attn * ctx
        by = self.weight_bytes(n_decode) + ctx * self.kv_bytes_per_token
        return np.maximum(flops / self.flops_s, by / self.hbm_s) + self.overhead_s

    def decode_cum_s(self, n_decode: int, ctx_tokens: int, steps: int) -> np.ndarray:
        """End offsets of `steps` consecutive decode-only steps: `decode_steps_s`' running sum,
        compiled (the same operations in the same order, so the same bits as numpy's)."""
        return _decode_cum(
            float(n_decode),
            float(ctx_tokens),
            steps,
            self.lin * n_decode,
            self.attn,
            self.weight_bytes(n_decode),
            float(self.kv_bytes_per_token),
            self.flops_s,
            self.hbm_s,
            self.overhead_s,
        )

    def transfer_s(self, tokens: int, chunks: int = 0) -> float:
        """Time to move `tokens` tokens of KV (per rank), in `chunks` chunks, over the host link."""
        return tokens * self.kv_bytes_per_token / self.link_s + chunks * self.transfer_overhead_s


@numba.njit(cache=True, nogil=True)
def _decode_cum(
    n_decode, ctx_tokens, steps, lin_flops, attn, weight_bytes, kv_bytes, flops_s, hbm_s, overhead_s
):  # pragma: no cover - compiled
    out = np.empty(steps, dtype=np.float64)
    acc = 0.0
    for i in range(steps):
        ctx = ctx_tokens + n_decode * float(i)
        flops = lin_flops + attn * ctx
        by = weight_bytes + ctx * kv_bytes
        acc += max(flops / flops_s, by / hbm_s) + overhead_s
        out[i] = acc
    return out
