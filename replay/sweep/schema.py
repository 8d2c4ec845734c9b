"""The experiment file's schema: strict pydantic models generated from the option dataclasses.

Each table's keys, types and enumerations come from the dataclass that consumes it (`RunOptions`
for [run], `Timeouts`, `Warmup`, `PredictSpec`, the simulator's `SimConfig` for its engine
options, `FoldSpec` and `synth`'s signature for the trace), so a new option is accepted where it is
defined, not in a second key list. Types are strict (`"yes"` is not a boolean, `1.5` not an
integer), infinities and NaN are refused, unknown keys are refused. Ranges stay with each
dataclass (`Annotated` bounds or its `__post_init__`), which is why a value is also built once.
Every failure is a ConfigError naming the file and the key path.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import typing
from collections.abc import Callable, Mapping
from functools import cache
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from replay.errors import ConfigError

__all__ = [
    "STRICT",
    "fields_model",
    "signature_model",
    "check_table",
    "build_checked",
    "run_model",
    "run_keys",
    "bad_number",
]

STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


def fields_model(
    cls: type, *, exclude: frozenset[str] = frozenset(), **override: Any
) -> type[BaseModel]:
    """A strict pydantic model with the fields, types (with their `Annotated` bounds) and
    defaults of dataclass `cls`; `override` replaces a field's (type, default)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    spec: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in exclude:
            continue
        if f.default is not dataclasses.MISSING:
            default: Any = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = ...
        spec[f.name] = override.pop(f.name, (hints[f.name], default))
    spec.update(override)
    return create_model(f"{cls.__name__}Table", __config__=STRICT, **spec)


def signature_model(
    fn: Callable, *, exclude: frozenset[str] = frozenset(), **extra: Any
) -> type[BaseModel]:
    """A strict pydantic model of `fn`'s keyword parameters (types from its annotations)."""
    hints = typing.get_type_hints(fn)
    spec: dict[str, Any] = {}
    for name, param in inspect.signature(fn).parameters.items():
        if name in exclude:
            continue
        default = ... if param.default is inspect.Parameter.empty else param.default
        spec[name] = (hints.get(name, Any), default)
    spec.update(extra)
    return create_model(f"{fn.__name__}Args", __config__=STRICT, **spec)


def _why(err: Mapping[str, Any], model: type[BaseModel]) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        valid = ", ".join(sorted(model.model_fields))
        return f"unknown key; valid: {valid}"
    if kind == "missing":
        return "required"
    return f"{err['msg'][0].lower()}{err['msg'][1:]}, got {err['input']!r}"


def check_table(
    model: type[BaseModel], table: Mapping[str, Any], source: str, path: Callable[[str], str]
) -> BaseModel:
    """Validate `table` against `model`; the first problem is a ConfigError at `path(key)`."""
    try:
        return model.model_validate(dict(table))
    except ValidationError as e:
        errors = e.errors()
        err = errors[0]
        loc = list(err["loc"])
        why = _why(err, model)
        index = next((i for i, p in enumerate(loc) if isinstance(p, int)), None)
        if index is not None:
            # a list item: name the key, say which item; a union names each type it tried
            tried = [
                x["loc"][index + 1]
                for x in errors
                if x["loc"][: index + 1] == err["loc"][: index + 1] and len(x["loc"]) > index + 1
            ]
            if len(tried) > 1:
                why = f"{err['input']!r} is not one of: {', '.join(map(str, tried))}"
            why = f"item {int(loc[index]) + 1}: {why}"
            loc = loc[:index]
        raise ConfigError(source, path(".".join(map(str, loc))), why) from None


def build_checked(
    cls: Callable[..., Any], kwargs: Mapping[str, Any], source: str, path: Callable[[str], str]
) -> Any:
    """`cls(**kwargs)` with its own range checks turned into a ConfigError at `path(field)`."""
    try:
        return cls(**kwargs)
    except ConfigError as e:
        key = (e.field or "").removeprefix("--").replace("-", "_")
        raise ConfigError(source, path(key) if key else path(""), e.why) from None
    except (TypeError, ValueError) as e:
        raise ConfigError(source, path(""), str(e)) from None


@cache
def run_model() -> type[BaseModel]:
    """[run]: `RunOptions` fields (less the adapter's hook), plus the HTTP transport's name;
    `pool` may come from the matrix instead, so it is optional here."""
    from replay.driver.http import DEFAULT_TRANSPORT, TRANSPORTS
    from replay.driver.options import RunOptions

    return fields_model(
        RunOptions,
        exclude=frozenset({"request_extras"}),
        pool=(Annotated[int, Field(ge=1)] | None, None),
        transport=(Literal[tuple(TRANSPORTS)], DEFAULT_TRANSPORT),  # type: ignore[valid-type]
    )


def run_keys() -> frozenset[str]:
    return frozenset(run_model().model_fields)


def bad_number(value: Any, path: str) -> tuple[str, str] | None:
    """(key path, why) of the first number in `value` (nested tables and lists) that no option
    can mean, or None: infinity or NaN (no option of any engine means infinity, and `inf` would
    reach arithmetic as a size), or an integer past 64 bits (TOML's own bound: Python's reader
    takes any, and a larger one failed only when a run's records were written)."""
    if isinstance(value, float) and not math.isfinite(value):
        return path, "must be a finite number"
    if isinstance(value, int) and not -(1 << 63) <= value < (1 << 63):
        return path, f"{value} does not fit in a TOML (64-bit) integer"
    if isinstance(value, Mapping):
        items: Any = ((f"{path}.{k}" if path else str(k), v) for k, v in value.items())
    elif isinstance(value, list | tuple):
        items = ((path, v) for v in value)
    else:
        return None
    for sub_path, sub in items:
        found = bad_number(sub, sub_path)
        if found is not None:
            return found
    return None
