"""Small helpers shared by the launched-engine adapters: option checks and argv pieces."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from replay.errors import ConfigError

__all__ = ["LAUNCH_OPTIONS", "require", "extra_args", "extra_env", "gib_to_bytes", "flag_value"]

# Options every launched engine understands (beside its own).
LAUNCH_OPTIONS = frozenset(
    {"model", "python", "extra_args", "env", "ready_timeout_s", "served_model_name"}
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
