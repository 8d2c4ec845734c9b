"""Simulator configuration: the frozen `SimConfig` that decides a simulated run.

`replay sim serve`, `replay run --engine sim` and sweeps build it from the same SIMOPTS (the click
options live in `replay.cli.sim_options`; sweeps pass the TOML keys) via `SimConfig.from_options`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from replay.errors import ConfigError
from replay.model.presets import (
    GIB,
    MAX_TIER_GIB,
    HardwarePreset,
    ModelPreset,
    get_hardware,
    get_model,
)
from replay.sim.batch_defaults import batch_defaults_for

__all__ = [
    "WRITE_POLICIES",
    "ADMISSIONS",
    "DEVICE_EVICTIONS",
    "PERSONALITIES",
    "SimConfig",
]

WRITE_POLICIES = ("write-through", "write-back", "selective")
ADMISSIONS = ("all", "fixed", "conditioned", "rate", "ttl")
DEVICE_EVICTIONS = ("block", "session")
PERSONALITIES = ("reference", "vllm", "llamacpp")


@dataclass(frozen=True)
class SimConfig:
    """Everything that decides a simulated run. Capacities are per tensor-parallel rank (GiB).

    `efficiency` scales both peak FLOP/s and HBM bandwidth (a roofline at a stated efficiency).
    `attention_flops` adds the attention term to prefill/decode FLOPs (off reproduces arithmetic
    that prices a prefill at 2 FLOPs per parameter per token only, as the explainer does).
    """

    hardware: str = "h20"
    model: str = "qwen3-coder-30b-a3b"
    tp: int = 8
    device_kv_gib: float = 8.0
    host_tier_gib: float = 0.0
    block_tokens: int = 16
    chunk_tokens: int = 256
    write_policy: str = "write-through"
    admission: str = "all"
    kappa: int = 8  # fixed/conditioned: decline requests with more new full chunks than this
    rate_limit_gib_s: float = 1.0  # rate: host-write budget per second (token bucket, 1 s burst)
    ttl_s: float = 30.0  # ttl: how long a finished call's device blocks stay pinned
    window_s: float = 60.0  # conditioned: window of the runtime working-set estimate
    device_eviction: str = "block"
    # off: no device block is shared or kept for a later request (vLLM's --no-enable-prefix-caching);
    # each call computes its whole prompt unless the host tier restores part of it
    enable_prefix_caching: bool = True
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    # "": the two values above as given; "vllm-0.13.0": both as that vLLM's API server picks them
    # from the card's memory when its flags are unset (replay.sim.batch_defaults), which is how
    # the EfficientAgent study's budget was set on each card. The derived values replace the fields.
    batch_defaults: str = ""
    efficiency: float = 0.6
    attention_flops: bool = True
    step_overhead_s: float = 0.0
    # host-link costs: the share of the link's bandwidth a copy achieves, a fixed cost per chunk
    # moved, and whether transfers stall the whole engine step (vLLM's KV-connector API: loads
    # start before the forward and saves are waited for at its end) or overlap other requests'
    # compute (only the restoring request waits)
    host_link_efficiency: float = 1.0
    transfer_overhead_s: float = 0.0
    blocking_transfers: bool = False
    max_model_len: int = 1 << 20
    time_scale: float = 0.0
    jitter: float = 0.0  # service-time noise: each planned stretch x (1 + jitter * U(-1, 1))
    seed: int = 0  # seeds the jitter; with jitter 0 the engine draws no random numbers
    # whose cache the simulator imitates (replay.sim.personality) and, when set, a costs file
    # written by `replay calibrate` that replaces the roofline with costs fitted to a real engine
    personality: str = "reference"
    costs: str = ""
    # llamacpp personality: the RAM tier in MiB as llama.cpp's --cache-ram gives it (-1: no
    # limit), instead of host_tier_gib x 1024; a twin of a sweep whose matrix names it keeps
    # that matrix, so its points carry the measured sweep's names
    cache_ram_mib: int | None = None

    def __post_init__(self) -> None:
        self.model_preset  # noqa: B018  (validates names early)
        self.hardware_preset  # noqa: B018

        def bad(field: str, why: str) -> ConfigError:
            return ConfigError("sim options", f"--{field.replace('_', '-')}", why)

        for f in (
            "tp", "block_tokens", "chunk_tokens", "max_num_seqs", "max_num_batched_tokens",
            "max_model_len",
        ):  # fmt: skip
            if int(getattr(self, f)) <= 0:
                raise bad(f, f"must be a positive integer, got {getattr(self, f)}")
        if self.chunk_tokens % self.block_tokens:
            raise bad("chunk_tokens", "must be a multiple of --block-tokens")
        for f in ("device_kv_gib", "host_tier_gib"):
            if not 0 <= float(getattr(self, f)) <= MAX_TIER_GIB:
                raise bad(f, f"must be in [0, {MAX_TIER_GIB:,.0f}] GiB, got {getattr(self, f)}")
        # inf is a meaning here: no write budget, pinned for good, an unbounded window
        for f in ("rate_limit_gib_s", "ttl_s", "window_s"):
            if not float(getattr(self, f)) >= 0:
                raise bad(f, f"must be >= 0, got {getattr(self, f)}")
        if not self.kappa >= 0:
            raise bad("kappa", f"must be >= 0, got {self.kappa}")
        if not 0 < self.efficiency <= 1:
            raise bad("efficiency", f"must be in (0, 1], got {self.efficiency}")
        for f in ("time_scale", "step_overhead_s"):
            if not 0 <= float(getattr(self, f)) < math.inf:
                raise bad(f, f"must be a finite number >= 0, got {getattr(self, f)}")
        if not int(self.seed) >= 0:  # numpy's seeding takes no negative seed
            raise bad("seed", f"must be an integer >= 0, got {self.seed}")
        if not 0 < self.host_link_efficiency <= 1:
            raise bad("host_link_efficiency", f"must be in (0, 1], got {self.host_link_efficiency}")
        if not self.transfer_overhead_s >= 0:
            raise bad("transfer_overhead_s", f"must be >= 0, got {self.transfer_overhead_s}")
        if not 0 <= self.jitter < 1:
            raise bad("jitter", f"must be in [0, 1), got {self.jitter}")
        for f, valid in (
            ("write_policy", WRITE_POLICIES),
            ("admission", ADMISSIONS),
            ("device_eviction", DEVICE_EVICTIONS),
            ("personality", PERSONALITIES),
        ):
            if getattr(self, f) not in valid:
                raise bad(f, f"unknown value {getattr(self, f)!r}; valid: {', '.join(valid)}")
        if not self.enable_prefix_caching and (
            self.personality == "llamacpp" or self.write_policy == "write-back"
        ):
            # llamacpp reuses slots, not blocks; write-back writes what the device evicts, and
            # uncached blocks are never evicted, only freed
            raise bad(
                "enable_prefix_caching",
                "off needs the reference or vllm personality and a write policy other than "
                "write-back",
            )
        if self.cache_ram_mib is not None:
            if self.personality != "llamacpp":
                raise bad("cache_ram_mib", "needs the llamacpp personality (others: host_tier_gib)")
            if isinstance(self.cache_ram_mib, bool) or not isinstance(self.cache_ram_mib, int):
                raise bad("cache_ram_mib", f"must be an integer, got {self.cache_ram_mib!r}")
            if self.cache_ram_mib < -1:
                raise bad(
                    "cache_ram_mib", f"must be >= -1 (-1: no limit), got {self.cache_ram_mib}"
                )
            if self.host_tier_gib:
                raise bad("cache_ram_mib", "give cache_ram_mib or host_tier_gib, not both")
        if self.batch_defaults:
            self._apply_batch_defaults()  # an unknown rule is a ConfigError listing the valid ones
        if self.costs:
            from replay.sim.fitted_cost import load_costs

            load_costs(self.costs)  # a missing or malformed file is a ConfigError naming it
        if self.device_blocks < 1:
            raise bad("device_kv_gib", "holds less than one KV block; make it larger")
        if self.personality == "llamacpp":
            # its RAM tier stores whole prompts (replay.sim.personality): the chunked tier's
            # policies would be taken and ignored
            for f, default in (("write_policy", "write-through"), ("admission", "all")):
                if getattr(self, f) != default:
                    raise bad(
                        f, f"the llamacpp personality has no chunked host tier: keep {default}"
                    )
        elif self.host_tier_gib and self.host_chunks < 1:
            mib = self.chunk_bytes / 2**20
            raise bad(
                "host_tier_gib",
                f"holds less than one host chunk ({self.chunk_tokens} tokens, {mib:,.2f} MiB); "
                "make it larger, or 0 for no host tier",
            )

    def _apply_batch_defaults(self) -> None:
        """Replace max_num_batched_tokens and max_num_seqs by the rule's values for the card. A
        field may hold its class default (not set) or the rule's own value (a recorded config read
        back); any other value conflicts with the rule and is refused."""
        derived = dict(
            zip(
                ("max_num_batched_tokens", "max_num_seqs"),
                batch_defaults_for(self.batch_defaults, self.hardware_preset),
                strict=True,
            )
        )
        for name, value in derived.items():
            given = getattr(self, name)
            if given not in (self.__dataclass_fields__[name].default, value):
                raise self._batch_conflict(name, given, value)
            object.__setattr__(self, name, value)  # frozen: set once, during construction

    def _batch_conflict(self, name: str, given: int, value: int) -> ConfigError:
        return ConfigError(
            "sim options",
            f"--{name.replace('_', '-')}",
            f"{given} conflicts with --batch-defaults {self.batch_defaults}, which sets {value} "
            f"on {self.hardware}; drop one of the two",
        )

    @property
    def model_preset(self) -> ModelPreset:
        return get_model(self.model)

    @property
    def hardware_preset(self) -> HardwarePreset:
        return get_hardware(self.hardware)

    @property
    def bytes_per_token(self) -> int:
        """KV bytes per token per rank."""
        return self.model_preset.bytes_per_token(self.tp)

    @property
    def reserved_blocks(self) -> int:
        """Device blocks the engine keeps out of use: vLLM keeps one as its null block."""
        return 1 if self.personality == "vllm" else 0

    @property
    def device_blocks(self) -> int:
        """Device tier capacity in blocks of `block_tokens`, less the reserved ones."""
        blocks = int(self.device_kv_gib * GIB) // (self.block_tokens * self.bytes_per_token)
        return blocks - self.reserved_blocks

    @property
    def chunk_bytes(self) -> int:
        return self.chunk_tokens * self.bytes_per_token

    @property
    def host_chunks(self) -> int:
        """Host tier capacity in chunks: floor(host_bytes / (chunk_tokens * bytes_per_token))."""
        return int(self.host_tier_gib * GIB) // self.chunk_bytes

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_options(cls, **kwargs: Any) -> SimConfig:
        """Build from click keyword arguments: SimConfig fields are taken, others ignored; None means
        the default. With --batch-defaults, a budget or seat count given explicitly must be the
        rule's own value (an explicit value equal to the class default is refused here too)."""
        names = {f.name for f in dataclasses.fields(cls)}
        given = {k: v for k, v in kwargs.items() if k in names and v is not None}
        config = cls(**given)
        for name in ("max_num_batched_tokens", "max_num_seqs"):
            if config.batch_defaults and name in given and given[name] != getattr(config, name):
                raise config._batch_conflict(name, given[name], getattr(config, name))
        return config
