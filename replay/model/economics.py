"""Offload economics per hardware: is restoring a prefix over the host link cheaper than recomputing it?

Restoring `n` tokens moves `n * beta` bytes per rank over the host link; recomputing them costs the
prefill FLOPs of `n` tokens (linear: 2 per active parameter per token; attention: causal, so the
i-th token attends to i earlier ones), spread over the TP ranks at `efficiency` of peak. The benefit
ratio `1 - restore_s / recompute_s` is the fraction of the recompute time a restore saves: near 1 on
compute-rich cards with fast links, negative where the link is slower than the compute it replaces.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from replay.errors import ConfigError
from replay.model.presets import HARDWARE, HardwarePreset, ModelPreset

__all__ = [
    "prefill_flops",
    "recompute_s",
    "restore_s",
    "offload_benefit_ratio",
    "Economics",
    "economics",
    "economics_table",
]


def prefill_flops(model: ModelPreset, n_tokens: int, *, attention: bool = True) -> float:
    """FLOPs (all ranks) to prefill `n_tokens` from scratch: `2 P n + 4 L H d * n (n + 1) / 2`."""
    if n_tokens < 0:
        raise ConfigError("economics", "n_tokens", f"must be >= 0, got {n_tokens}")
    linear = model.linear_flops_per_token() * n_tokens
    if not attention:
        return linear
    return linear + model.attention_flops_per_context_token() * n_tokens * (n_tokens + 1) / 2


def recompute_s(
    model: ModelPreset,
    hardware: HardwarePreset,
    n_tokens: int,
    *,
    tp: int = 1,
    efficiency: float = 1.0,
    attention: bool = True,
) -> float:
    """Seconds to recompute a prefix of `n_tokens` on `tp` cards at `efficiency` of peak."""
    if not 0 < efficiency <= 1:
        raise ConfigError("economics", "efficiency", f"must be in (0, 1], got {efficiency}")
    flops = prefill_flops(model, n_tokens, attention=attention)
    return flops / (tp * hardware.peak_flops * efficiency)


def restore_s(model: ModelPreset, hardware: HardwarePreset, n_tokens: int, *, tp: int = 1) -> float:
    """Seconds to copy a prefix of `n_tokens` from host DRAM over one rank's host link."""
    return n_tokens * model.bytes_per_token(tp) / hardware.host_link_bytes_per_s


def offload_benefit_ratio(
    model: ModelPreset,
    hardware: HardwarePreset,
    n_tokens: int,
    *,
    tp: int = 1,
    efficiency: float = 1.0,
    attention: bool = True,
) -> float:
    """Fraction of the recompute time of an `n_tokens` prefix saved by restoring it instead."""
    if n_tokens <= 0:
        return 0.0
    compute = recompute_s(
        model, hardware, n_tokens, tp=tp, efficiency=efficiency, attention=attention
    )
    return 1.0 - restore_s(model, hardware, n_tokens, tp=tp) / compute


@dataclass(frozen=True)
class Economics:
    """One hardware's numbers for one model: link price, and benefit per prefix length."""

    hardware: str
    compute_per_host_byte: float
    prefix_tokens: tuple[int, ...]
    recompute_s: tuple[float, ...]
    restore_s: tuple[float, ...]
    offload_benefit_ratio: tuple[float, ...]

    def to_dict(self) -> dict:
        return {
            "hardware": self.hardware,
            "compute_per_host_byte": self.compute_per_host_byte,
            "prefix": [
                {
                    "prefix_tokens": n,
                    "recompute_s": rc,
                    "restore_s": rs,
                    "offload_benefit_ratio": b,
                }
                for n, rc, rs, b in zip(
                    self.prefix_tokens,
                    self.recompute_s,
                    self.restore_s,
                    self.offload_benefit_ratio,
                    strict=True,
                )
            ],
        }


def economics(
    model: ModelPreset,
    hardware: HardwarePreset,
    prefix_tokens: Sequence[int],
    *,
    tp: int = 1,
    efficiency: float = 1.0,
    attention: bool = True,
) -> Economics:
    """Compute per host-link byte and, per prefix length, recompute/restore seconds and the benefit."""
    ns = tuple(int(n) for n in prefix_tokens)
    kw = {"tp": tp}
    return Economics(
        hardware=hardware.name,
        compute_per_host_byte=hardware.compute_per_host_byte,
        prefix_tokens=ns,
        recompute_s=tuple(
            recompute_s(model, hardware, n, efficiency=efficiency, attention=attention, **kw)
            for n in ns
        ),
        restore_s=tuple(restore_s(model, hardware, n, **kw) for n in ns),
        offload_benefit_ratio=tuple(
            offload_benefit_ratio(
                model, hardware, n, efficiency=efficiency, attention=attention, **kw
            )
            for n in ns
        ),
    )


def economics_table(
    model: ModelPreset,
    prefix_tokens: Sequence[int],
    *,
    hardware: Iterable[HardwarePreset] | None = None,
    tp: int = 1,
    efficiency: float = 1.0,
    attention: bool = True,
) -> list[Economics]:
    """`economics` for every hardware preset (or the given ones), in registry order."""
    hws = list(HARDWARE.values()) if hardware is None else list(hardware)
    return [
        economics(model, hw, prefix_tokens, tp=tp, efficiency=efficiency, attention=attention)
        for hw in hws
    ]
