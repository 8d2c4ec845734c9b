"""Small helpers shared by the launched-engine adapters: option checks and argv pieces."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from replay.errors import ConfigError

__all__ = [
    "LAUNCH_OPTIONS",
    "LAUNCH_OPTION_TYPES",
    "check_option_types",
    "require",
    "extra_args",
    "extra_env",
    "gib_to_bytes",
    "flag_value",
]

# Options every launched engine understands (beside its own).
LAUNCH_OPTIONS = frozenset(
    {"model", "python", "extra_args", "env", "ready_timeout_s", "served_model_name"}
)


# Option types of the launched engines, checked before any argv is built: a launched engine
# reads its options into command-line text, where `enforce_eager = "false"` became the flag,
# `tp = true` became `--tensor-parallel-size true`, and a negative capacity went through as
# written. (kind, lower bound, whether the bound itself is refused, upper bound)
OptionType = tuple[str, float | None, bool, float | None]
MAX_INT = (1 << 63) - 1  # the records write 64-bit integers
STR: OptionType = ("a string", None, False, None)
BOOL: OptionType = ("true or false", None, False, None)
TABLE: OptionType = ("a table of NAME = value", None, False, None)
STRINGS: OptionType = ("a list of strings", None, False, None)
INT_1: OptionType = ("an integer", 1, False, MAX_INT)
INT_0: OptionType = ("an integer", 0, False, MAX_INT)
NUM_0: OptionType = ("a number", 0, False, None)
NUM_POSITIVE: OptionType = ("a number", 0, True, None)
FRACTION: OptionType = ("a number", 0, True, 1)
LAUNCH_OPTION_TYPES: dict[str, OptionType] = {
    "model": STR,
    "python": STR,
    "extra_args": STRINGS,
    "env": TABLE,
    "ready_timeout_s": NUM_POSITIVE,
    "served_model_name": STR,
}


def check_option_types(
    options: Mapping[str, Any], engine: str, types: Mapping[str, OptionType]
) -> None:
    """ConfigError (field `engine.KEY`) for the first option whose value is not of its type or
    range; options without a type here are left to the adapter."""
    for key, value in options.items():
        if key not in types or value is None:
            continue
        kind, low, low_open, high = types[key]
        if kind == "a string":
            ok = isinstance(value, str)
        elif kind == "true or false":
            ok = isinstance(value, bool)
        elif kind == "a table of NAME = value":
            ok = isinstance(value, Mapping)
        elif kind == "a list of strings":
            ok = isinstance(value, list | tuple) and all(isinstance(a, str) for a in value)
        else:
            number = int if kind == "an integer" else int | float
            ok = isinstance(value, number) and not isinstance(value, bool)
            ok = ok and math.isfinite(value)
            if ok and low is not None:
                ok = value > low if low_open else value >= low
            ok = ok and (high is None or value <= high)
        if not ok:
            bound = ""
            if low is not None:
                bound = f" {'>' if low_open else '>='} {low:g}"
            if high is not None and high != MAX_INT:
                bound += f"{' and' if bound else ''} <= {high:g}"
            elif high is not None:
                bound += " (64-bit)"
            raise ConfigError(
                f"engine {engine}", f"engine.{key}", f"must be {kind}{bound}, got {value!r}"
            )


def require(options: Mapping[str, Any], key: str, engine: str) -> Any:
    """options[key], or a ConfigError naming the missing engine option."""
    if options.get(key) in (None, ""):
        raise ConfigError(f"engine {engine}", f"engine.{key}", "required option is missing")
    return options[key]


def extra_args(options: Mapping[str, Any], engine: str) -> list[str]:
    """`extra_args = [...]`: more command-line arguments appended verbatim (a list, no shell)."""
    value = options.get("extra_args", [])
    if not isinstance(value, list | tuple) or not all(isinstance(a, str) for a in value):
        raise ConfigError(f"engine {engine}", "engine.extra_args", "must be a list of strings")
    return list(value)


def extra_env(options: Mapping[str, Any], engine: str) -> dict[str, str]:
    """`env = {NAME = "value"}`: extra environment for the server process."""
    value = options.get("env", {})
    if not isinstance(value, Mapping):
        raise ConfigError(f"engine {engine}", "engine.env", "must be a table of NAME = value")
    return {str(k): str(v) for k, v in value.items()}


def gib_to_bytes(gib: float) -> int:
    """GiB (2**30 bytes) to bytes, as engines take capacities in bytes."""
    return int(round(float(gib) * (1 << 30)))


def flag_value(value: Any) -> str:
    """How a TOML value is written on a command line: 1.0 -> '1', 2.5 -> '2.5', True -> 'true'."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
