"""Hardware and model presets: the published numbers the cost model and the working-set model use.

Every number carries its source in `source`; docs/simulator.md tabulates them. Capacities and bytes
per token are per tensor-parallel rank, as the study gives them. A hardware preset may stand for a
group of cards priced as one (`explainer-4xa100`). Unknown names raise ConfigError listing the
valid keys.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from replay.errors import ConfigError

__all__ = [
    "GIB",
    "ModelPreset",
    "HardwarePreset",
    "MODELS",
    "HARDWARE",
    "get_model",
    "get_hardware",
    "GIB",
    "MAX_TIER_GIB",
]

GIB = 1 << 30
# the largest KV tier (device or host) a size may name, in GiB: 1 PiB. A bound, so that a typo
# (1e300) or inf is refused where it is written rather than overflowing a chunk count later.
MAX_TIER_GIB = float(1 << 20)


@dataclass(frozen=True)
class ModelPreset:
    """A transformer's shape as far as KV size and FLOPs go.

    `params_active` counts parameters touched per token (MoE: shared + routed experts used), which
    sets the linear FLOPs (2 per parameter per token); `params_total` sets the weight bytes a step
    may stream.
    """

    name: str
    layers: int
    q_heads: int
    kv_heads: int
    head_dim: int
    params_total: float
    params_active: float
    dtype_bytes: int = 2
    source: str = ""

    def __post_init__(self) -> None:
        for f in ("layers", "q_heads", "kv_heads", "head_dim", "dtype_bytes"):
            if int(getattr(self, f)) <= 0:
                raise ConfigError(f"model preset {self.name}", f, "must be a positive integer")
        if not (0 < self.params_active <= self.params_total):
            raise ConfigError(
                f"model preset {self.name}", "params_active", "must be in (0, params_total]"
            )

    def kv_heads_per_rank(self, tp: int) -> int:
        """KV heads each rank stores: heads are split across ranks, replicated when TP > heads."""
        if tp <= 0:
            raise ConfigError("model", "tp", f"must be a positive integer, got {tp}")
        return max(1, math.ceil(self.kv_heads / tp))

    def bytes_per_token(self, tp: int = 1) -> int:
        """KV bytes one token occupies on one rank: 2 (K and V) * layers * head_dim * dtype * heads/rank."""
        return 2 * self.layers * self.head_dim * self.dtype_bytes * self.kv_heads_per_rank(tp)

    def linear_flops_per_token(self) -> float:
        """FLOPs of the weight matmuls for one token, all ranks together (2 per active parameter)."""
        return 2.0 * self.params_active

    def attention_flops_per_context_token(self) -> float:
        """FLOPs one query token spends per context token it attends to (QK^T and AV), all ranks."""
        return 4.0 * self.layers * self.q_heads * self.head_dim


@dataclass(frozen=True)
class HardwarePreset:
    """One accelerator (or a group priced as one): peak dense BF16 FLOP/s, HBM and host-link bandwidth."""

    name: str
    peak_flops: float  # dense BF16 FLOP/s
    hbm_bytes_per_s: float
    host_link_bytes_per_s: float  # device <-> host DRAM, one direction
    memory_bytes: float
    source: str = ""

    def __post_init__(self) -> None:
        for f in ("peak_flops", "hbm_bytes_per_s", "host_link_bytes_per_s", "memory_bytes"):
            if not float(getattr(self, f)) > 0:
                raise ConfigError(f"hardware preset {self.name}", f, "must be positive")

    @property
    def compute_per_host_byte(self) -> float:
        """Peak FLOP/s per host-link byte/s: how many FLOPs recomputing costs per byte a restore moves."""
        return self.peak_flops / self.host_link_bytes_per_s

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB


_GB = 1e9
_TF = 1e12

MODELS: dict[str, ModelPreset] = {
    "qwen3-coder-30b-a3b": ModelPreset(
        name="qwen3-coder-30b-a3b",
        layers=48,
        q_heads=32,
        kv_heads=4,
        head_dim=128,
        params_total=30.5e9,
        params_active=3.3e9,
        source="Qwen/Qwen3-Coder-30B-A3B-Instruct config.json and model card (48 layers, 32 Q / 4 KV "
        "heads, head_dim 128, 30.5B total / 3.3B active, BF16)",
    ),
    "llama-3-70b": ModelPreset(
        name="llama-3-70b",
        layers=80,
        q_heads=64,
        kv_heads=8,
        head_dim=128,
        params_total=70.6e9,
        params_active=70.6e9,
        source="meta-llama/Meta-Llama-3-70B config.json (80 layers, 64 Q / 8 KV heads, hidden 8192)",
    ),
    "llama-3-8b": ModelPreset(
        name="llama-3-8b",
        layers=32,
        q_heads=32,
        kv_heads=8,
        head_dim=128,
        params_total=8.0e9,
        params_active=8.0e9,
        source="meta-llama/Meta-Llama-3-8B config.json (32 layers, 32 Q / 8 KV heads, hidden 4096)",
    ),
    "tiny-llama": ModelPreset(
        name="tiny-llama",
        layers=2,
        q_heads=4,
        kv_heads=2,
        head_dim=64,
        params_total=5.4e6,
        params_active=5.4e6,
        source="the project's CI model (replay.engines.tinymodel: hidden 256, 2 layers, 4 Q / 2 KV "
        "heads, vocab 8192, BF16; 1 KiB of KV per token), served by vLLM on CPU in make test-vllm",
    ),
    "tiny-gguf": ModelPreset(
        name="tiny-gguf",
        layers=2,
        q_heads=4,
        kv_heads=4,
        head_dim=64,
        params_total=5.8e6,
        params_active=5.8e6,
        source="the project's llama.cpp CI model (replay.engines.gguf_tiny: hidden 256, 2 layers, "
        "4 Q / 4 KV heads, vocab 8192, f16 KV; 2 KiB of KV per token), served by llama.cpp on CPU",
    ),
}

_PCIE4 = 32 * _GB  # PCIe 4.0 x16, one direction
_PCIE5 = 64 * _GB  # PCIe 5.0 x16, one direction

HARDWARE: dict[str, HardwarePreset] = {
    "rtx-3090": HardwarePreset(
        "rtx-3090",
        71 * _TF,
        936 * _GB,
        _PCIE4,
        24 * _GB,
        "NVIDIA Ampere GA102 whitepaper (RTX 3090: 71 TFLOPS dense BF16 tensor w/ FP32 acc., "
        "936 GB/s GDDR6X, 24 GB); PCIe 4.0 x16",
    ),
    "a100-40gb": HardwarePreset(
        "a100-40gb",
        312 * _TF,
        1555 * _GB,
        _PCIE4,
        40 * _GB,
        "NVIDIA A100 datasheet (312 TFLOPS dense BF16, 1,555 GB/s HBM2, 40 GB); PCIe 4.0 x16",
    ),
    "a100-80gb": HardwarePreset(
        "a100-80gb",
        312 * _TF,
        2039 * _GB,
        _PCIE4,
        80 * _GB,
        "NVIDIA A100 datasheet (SXM 80GB: 312 TFLOPS dense BF16, 2,039 GB/s HBM2e); PCIe 4.0 x16",
    ),
    "h20": HardwarePreset(
        "h20",
        148 * _TF,
        4000 * _GB,
        _PCIE5,
        96 * _GB,
        "NVIDIA H20 product brief (148 TFLOPS dense BF16, 4.0 TB/s HBM3, 96 GB); PCIe 5.0 x16",
    ),
    "h800": HardwarePreset(
        "h800",
        989.5 * _TF,
        3350 * _GB,
        _PCIE5,
        80 * _GB,
        "NVIDIA H800 SXM (H100 SXM compute: 989.5 TFLOPS dense BF16, 3.35 TB/s HBM3, 80 GB); "
        "PCIe 5.0 x16",
    ),
    "h100": HardwarePreset(
        "h100",
        989.5 * _TF,
        3350 * _GB,
        _PCIE5,
        80 * _GB,
        "NVIDIA H100 datasheet (SXM: 989.5 TFLOPS dense BF16, 3.35 TB/s HBM3, 80 GB); PCIe 5.0 x16",
    ),
    "h200": HardwarePreset(
        "h200",
        989.5 * _TF,
        4800 * _GB,
        _PCIE5,
        141 * _GB,
        "NVIDIA H200 datasheet (SXM: 989.5 TFLOPS dense BF16, 4.8 TB/s HBM3e, 141 GB); PCIe 5.0 x16",
    ),
    "b200": HardwarePreset(
        "b200",
        2250 * _TF,
        8000 * _GB,
        _PCIE5,
        180 * _GB,
        "NVIDIA DGX B200 / HGX B200 specs (per GPU: 2.25 PFLOPS dense BF16, 8 TB/s HBM3e, 180 GB); "
        "PCIe 5.0 x16 host link",
    ),
    "explainer-4xa100": HardwarePreset(
        "explainer-4xa100",
        4 * 312 * _TF,
        4 * 1555 * _GB,
        12 * _GB,
        4 * 80 * _GB,
        "the explainer's setup: four 80 GB A100s priced at A100 40GB peak (4 x 312 TFLOPS) and "
        "bandwidth (4 x 1,555 GB/s), one 12 GB/s effective host link",
    ),
}


def _lookup(table: dict, kind: str, name: str):
    try:
        return table[name]
    except KeyError:
        valid = ", ".join(sorted(table))
        raise ConfigError(f"--{kind}", kind, f"unknown {kind} {name!r}; valid: {valid}") from None


def get_model(name: str) -> ModelPreset:
    """The model preset called `name`; ConfigError listing the valid names otherwise."""
    return _lookup(MODELS, "model", name)


def get_hardware(name: str) -> HardwarePreset:
    """The hardware preset called `name`; ConfigError listing the valid names otherwise."""
    return _lookup(HARDWARE, "hardware", name)
