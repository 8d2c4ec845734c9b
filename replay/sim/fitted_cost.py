"""Costs fitted to a real engine (`replay calibrate`), in place of the roofline `CostModel`.

Pure. The model is linear in its coefficients, so a least-squares fit over per-call records can
recover them (replay.calibrate.fit):

- a step: `decode_step_s` once if it decodes anything, `decode_s_per_seq` per decoding sequence,
  and per prefill chunk of `n` new tokens after `p` cached ones `prefill_s_per_token * n +
  attention_s_per_pair * (n * p + n (n + 1) / 2)` (the pairs of causal attention, as in
  `CostModel`; the fit sees the attention term grow with context);
- a restore or write of `tokens` tokens in `chunks` chunks: `restore_s_per_token * tokens +
  restore_s_per_chunk * chunks`;
- `request_overhead_s` once per request, before its prefill (HTTP, scheduling, sampling setup),
  while other requests go on computing.

Stored as TOML, `[costs]` holding these fields plus a free-form `[fit]` table the calibrator
fills with its provenance and residuals (never read back by the simulator).
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from replay.errors import ConfigError

__all__ = ["FittedCosts", "FittedCostModel", "load_costs", "costs_toml"]


@dataclass(frozen=True)
class FittedCosts:
    """Coefficients of the fitted cost model, seconds (all >= 0)."""

    request_overhead_s: float = 0.0
    prefill_s_per_token: float = 0.0
    attention_s_per_pair: float = 0.0
    decode_step_s: float = 0.0
    decode_s_per_seq: float = 0.0
    restore_s_per_token: float = 0.0
    restore_s_per_chunk: float = 0.0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            # inf too: an infinite step never ends, and the simulation spun on it for good
            if not isinstance(v, int | float) or isinstance(v, bool) or not 0 <= v < math.inf:
                raise ConfigError("costs", f.name, f"must be a finite number >= 0, got {v!r}")

    def to_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in dataclasses.asdict(self).items()}


def load_costs(path: str | Path) -> FittedCosts:
    """Read the `[costs]` table of a costs file; ConfigError naming the file and field if bad."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        # the path in the words too: an experiment's loader keeps only these
        where = "" if p.is_absolute() else f" (relative to {Path.cwd()})"
        raise ConfigError(
            str(p), "costs", f"cannot read costs file {str(p)!r}{where}: {e.strerror or e}"
        ) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(
            str(p), "costs", f"costs file {str(p)!r} is not valid TOML: {e}"
        ) from None
    table = data.get("costs")
    if not isinstance(table, dict):
        raise ConfigError(str(p), "costs", "missing [costs] table; write one with replay calibrate")
    names = {f.name for f in dataclasses.fields(FittedCosts)}
    unknown = sorted(set(table) - names)
    if unknown:
        raise ConfigError(
            str(p), f"costs.{unknown[0]}", f"unknown cost; valid: {', '.join(sorted(names))}"
        )
    try:
        return FittedCosts(**table)
    except ConfigError as e:
        raise ConfigError(str(p), f"costs.{e.field}", e.why) from None


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(float(v)) if isinstance(v, float) else str(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def costs_toml(costs: FittedCosts, fit: dict[str, Any] | None = None) -> str:
    """The costs file's text: `[costs]`, then `[fit]` (scalars and lists of scalars only)."""
    lines = ["# written by replay calibrate: the simulator's costs fitted to an engine's runs", ""]
    lines.append("[costs]")
    lines += [f"{k} = {_toml_value(v)}" for k, v in costs.to_dict().items()]
    if fit:
        lines += ["", "[fit]"]
        lines += [f"{k} = {_toml_value(v)}" for k, v in fit.items() if v is not None]
    return "\n".join(lines) + "\n"


class FittedCostModel:
    """The `CostModel` interface (step, decode stretch, transfer) over fitted coefficients."""

    def __init__(self, costs: FittedCosts):
        self.costs = costs
        self.request_overhead_s = costs.request_overhead_s

    def prefill_s(self, n_tokens: int, prefix_tokens: int) -> float:
        """Compute time of `n_tokens` new tokens after `prefix_tokens` cached ones."""
        n = float(n_tokens)
        pairs = n * prefix_tokens + n * (n + 1) / 2
        return self.costs.prefill_s_per_token * n + self.costs.attention_s_per_pair * pairs

    def step_s(self, chunks: list[tuple[int, int]], n_decode: int, decode_ctx_tokens: int) -> float:
        c = self.costs
        t = c.decode_step_s + c.decode_s_per_seq * n_decode if n_decode else 0.0
        # added left to right, not with sum(): from Python 3.12 sum() compensates float rounding,
        # so a step of several chunks would end in other bits than on 3.11, and so every later time
        prefill = 0.0
        for n, p in chunks:
            prefill += self.prefill_s(n, p)
        return t + prefill

    def decode_steps_s(self, n_decode: int, ctx_tokens: int, steps: int) -> np.ndarray:
        step = self.costs.decode_step_s + self.costs.decode_s_per_seq * n_decode
        return np.full(steps, step, dtype=np.float64)

    def decode_cum_s(self, n_decode: int, ctx_tokens: int, steps: int) -> np.ndarray:
        return np.cumsum(self.decode_steps_s(n_decode, ctx_tokens, steps))

    def transfer_s(self, tokens: int, chunks: int = 0) -> float:
        return self.costs.restore_s_per_token * tokens + self.costs.restore_s_per_chunk * chunks
