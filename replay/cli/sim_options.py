"""The SIMOPTS click options: one flag per `SimConfig` field, shared by `replay sim serve` and
`replay run --engine sim` (`@sim_options`, then `SimConfig.from_options(**kwargs)`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from replay.sim.batch_defaults import BATCH_DEFAULTS
from replay.sim.options import (
    ADMISSIONS,
    DEVICE_EVICTIONS,
    PERSONALITIES,
    WRITE_POLICIES,
    SimConfig,
)

__all__ = ["sim_options"]

_D = SimConfig.__dataclass_fields__


def _default(name: str) -> Any:
    return _D[name].default


def _shown(value: Any, flag: str) -> str:
    """A default as --help shows it: the flag a boolean pair defaults to, `off` for unset."""
    if isinstance(value, bool) and "/" in flag:
        on, off = flag.split("/")
        return on if value else off
    return "off" if value in ("", None) else str(value)


# (flag, click kwargs), one per SimConfig field: the sweep-level SIMOPTS plus the simulator's own knobs.
_OPTIONS: list[tuple[str, dict[str, Any]]] = [
    ("--hardware", {"help": "hardware preset (see docs/simulator.md)"}),
    ("--model", {"help": "model preset"}),
    ("--tp", {"type": int, "help": "tensor-parallel ranks"}),
    ("--device-kv-gib", {"type": float, "help": "device KV capacity per rank, GiB"}),
    ("--host-tier-gib", {"type": float, "help": "host KV tier per rank, GiB (0: none)"}),
    ("--block-tokens", {"type": int, "help": "device block size, tokens"}),
    ("--chunk-tokens", {"type": int, "help": "host tier chunk size, tokens"}),
    ("--write-policy", {"type": click.Choice(WRITE_POLICIES), "help": "host tier write policy"}),
    ("--admission", {"type": click.Choice(ADMISSIONS), "help": "host-write admission policy"}),
    (
        "--kappa",
        {
            "type": int,
            "help": "fixed/conditioned: a call whose prompt has more than this many full chunks "
            "beyond the prefix the host tier holds writes none",
        },
    ),
    ("--rate-limit-gib-s", {"type": float, "help": "rate: host-write budget, GiB/s"}),
    ("--ttl-s", {"type": float, "help": "ttl: seconds a finished call's blocks stay pinned"}),
    ("--window-s", {"type": float, "help": "conditioned: estimator window, seconds"}),
    (
        "--device-eviction",
        {"type": click.Choice(DEVICE_EVICTIONS), "help": "block: LRU tail-first; session: whole"},
    ),
    (
        "--enable-prefix-caching/--no-enable-prefix-caching",
        {"default": None, "help": "share and keep device KV blocks across requests (vLLM's flag)"},
    ),
    ("--max-num-seqs", {"type": int, "help": "max running sequences"}),
    (
        "--max-model-len",
        {"type": int, "help": "longest prompt + output a request may have, tokens (vLLM's flag)"},
    ),
    ("--max-num-batched-tokens", {"type": int, "help": "token budget per step (chunked prefill)"}),
    (
        "--batch-defaults",
        {
            "type": click.Choice(sorted(BATCH_DEFAULTS)),
            "help": "derive the step budget and seats from the card as this vLLM does when its "
            "flags are unset",
        },
    ),
    ("--efficiency", {"type": float, "help": "fraction of peak FLOP/s and bandwidth achieved"}),
    ("--attention-flops/--no-attention-flops", {"default": None, "help": "count attention FLOPs"}),
    ("--step-overhead-s", {"type": float, "help": "fixed cost per engine step, seconds"}),
    (
        "--host-link-efficiency",
        {"type": float, "help": "fraction of the host link's bandwidth a KV copy achieves"},
    ),
    (
        "--transfer-overhead-s",
        {"type": float, "help": "fixed cost per KV chunk moved over the host link, seconds"},
    ),
    (
        "--blocking-transfers/--overlapped-transfers",
        {"default": None, "help": "host-link copies stall the whole engine step (vLLM connector)"},
    ),
    (
        "--time-scale",
        {"type": float, "help": "server: wall seconds per simulated second (0: ASAP)"},
    ),
    (
        "--jitter",
        {"type": float, "help": "service-time noise: each stretch x (1 + J*U(-1,1)), seeded"},
    ),
    ("--seed", {"type": int, "help": "seed of the service-time noise"}),
    (
        "--personality",
        {"type": click.Choice(PERSONALITIES), "help": "whose cache to imitate (vllm, llamacpp)"},
    ),
    ("--costs", {"help": "costs TOML from `replay calibrate` (replaces the roofline)"}),
    (
        "--cache-ram-mib",
        {
            "type": int,
            "help": "llamacpp personality: RAM tier MiB (-1: no limit), not the host tier",
        },
    ),
]


def sim_options(f: Callable) -> Callable:
    """Decorator adding the SIMOPTS options; every option defaults to None (= SimConfig default)."""
    for flag, kw in reversed(_OPTIONS):
        name = flag.split("/")[0].removeprefix("--").replace("-", "_")
        kw = dict(kw)
        if "default" not in kw:
            kw["default"] = None
        kw["help"] = f"{kw.get('help', '')} [default: {_shown(_default(name), flag)}]"
        f = click.option(flag, name, **kw)(f)
    return f
