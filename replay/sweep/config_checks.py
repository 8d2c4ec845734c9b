"""Checks of an experiment file that its table schemas cannot express: the synth arguments, the
matrix values, and every point against its engine and the driver's run options.

Each raises a ConfigError naming the file and the key where the value was written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from replay.errors import ConfigError
from replay.model.presets import MAX_TIER_GIB
from replay.sweep import schema
from replay.sweep.experiment import Experiment, Point, value_name
from replay.sweep.schema import build_checked, check_table, fields_model

__all__ = ["check_synth", "parse_matrix", "check_points"]


def _number(
    where: str,
    fld: str,
    value: Any,
    *,
    minimum: float,
    integer: bool = False,
    maximum: float | None = None,
) -> Any:
    ok_type = (int,) if integer else (int, float)
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, ok_type) or not value >= minimum:
        raise ConfigError(where, fld, f"must be {kind} >= {minimum}, got {value!r}")
    if maximum is not None and not value <= maximum:
        raise ConfigError(where, fld, f"must be {kind} <= {maximum:,.0f}, got {value!r}")
    return value


def check_synth(where: str, synth: Mapping[str, Any]) -> None:
    """`synth`'s own keyword arguments (and `fold`, a FoldSpec table), with their types; the
    preset and the fold's ranges are checked by building them."""
    from replay.trace.fold import FoldSpec
    from replay.trace.synth import check_synth_args, get_preset
    from replay.trace.synth import synth as synth_fn

    args = schema.signature_model(synth_fn, fold=(dict[str, Any] | None, None))
    check_table(args, synth, where, lambda k: f"trace.synth.{k}")
    build_checked(get_preset, {"name": synth["preset"]}, where, lambda k: "trace.synth.preset")
    defaults: dict[str, Any] = {
        "tasks": 1, "seed": 0, "shared_head_tokens": None, "vocab_size": 32000, "scale": 1.0,
        "max_prompt_tokens": None, "max_calls_per_task": None,
    }  # fmt: skip
    given: dict[str, Any] = {
        k: synth.get(k) if synth.get(k) is not None else v for k, v in defaults.items()
    }
    try:
        check_synth_args(**given)
    except ConfigError as e:
        raise ConfigError(where, f"trace.synth.{e.field}", e.why) from None
    if synth.get("fold") is not None:
        fold_path = lambda k: f"trace.synth.fold.{k}" if k else "trace.synth.fold"  # noqa: E731
        check_table(fields_model(FoldSpec), synth["fold"], where, fold_path)
        build_checked(FoldSpec, synth["fold"], where, fold_path)


def parse_matrix(where: str, table: Mapping[str, Any]) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    """The [matrix] table as (key, values) pairs in file order; the keys the sweep knows by name
    get their ranges checked here, the rest per point against the engine (`check_points`)."""
    out = []
    for key, values in table.items():
        fld = f"matrix.{key}"
        # two values with one point name (2 and 2.0) would share one results folder
        names = [value_name(v) for v in values]
        if len(set(names)) != len(names):
            raise ConfigError(where, fld, f"values repeat (as point names: {', '.join(names)})")
        if key in ("host_tier_gib", "device_kv_gib"):
            for v in values:
                _number(where, fld, v, minimum=0, maximum=MAX_TIER_GIB)
        if key == "kappa":
            for v in values:
                _number(where, fld, v, minimum=0)
        if key == "pool":
            for v in values:
                _number(where, fld, v, minimum=1, integer=True)
        if key == "engine":
            for v in values:
                if not isinstance(v, str):
                    raise ConfigError(where, fld, f"values must be engine names, got {v!r}")
        out.append((key, tuple(values)))
    return tuple(out)


def check_points(exp: Experiment) -> None:
    """Every point, before anything starts (a bad value would otherwise fail each run)."""
    for point in exp.points():
        if len(point.name.encode()) > _NAME_MAX_BYTES:  # its folder failed after a run
            raise ConfigError(
                exp.source, "matrix",
                f"point name {point.name[:60]!r}... is {len(point.name.encode())} bytes, past a "
                f"folder name's {_NAME_MAX_BYTES}; shorten the swept values (a long path: "
                "move the file closer)",
            )  # fmt: skip
        _check_point(exp, point)
    _check_seed_spacing(exp)


_NAME_MAX_BYTES = 255  # a file name's limit on Linux and macOS file systems


def _check_seed_spacing(exp: Experiment) -> None:
    """A repeat's engine seed is its point's seed + the repeat number, so with `seed` swept, two
    seeds closer than `repeats` give the same run twice (seed=0/r1 is seed=1/r0), counted as
    two independent repeats in every interval."""
    if exp.repeats < 2:
        return
    groups: dict[tuple, list[int]] = {}
    for point in exp.points():
        if "seed" not in dict(point.params):
            continue
        engine, options, run = exp.resolve(point)
        rest = tuple(sorted((k, repr(v)) for k, v in options.items() if k != "seed"))
        key = (engine, rest, tuple(sorted((k, repr(v)) for k, v in run.items())))
        groups.setdefault(key, []).append(int(options.get("seed") or 0))
    for seeds in groups.values():
        seeds.sort()
        for a, b in zip(seeds, seeds[1:], strict=False):
            if b - a < exp.repeats:
                raise ConfigError(
                    exp.source, "matrix.seed",
                    f"{a} and {b} are closer than repeats = {exp.repeats}: a repeat's seed is "
                    f"its point's + the repeat number, so seed={a}/r{b - a} and seed={b}/r0 "
                    f"would be one run twice; space the seeds at least {exp.repeats} apart",
                )  # fmt: skip


def _check_point(exp: Experiment, point: Point) -> None:
    """The point's engine exists and takes its options (names, types, ranges); its run options
    build. Errors name the key where the value was written (matrix, [engine.<kind>], ...)."""
    from replay.driver.options import RunOptions
    from replay.engines.registry import get_engine

    engine, options, run = exp.resolve(point)
    swept = dict(point.params)
    override = dict(dict(exp.engine_overrides).get(engine, ()))

    def run_path(key: str) -> str:
        return f"matrix.{key}" if key in swept else f"run.{key or 'pool'}"

    def opt_path(key: str, engine: str = engine) -> str:
        if not key:
            return "engine"
        if key in swept:
            return f"matrix.{key}"
        return f"engine.{engine}.{key}" if key in override else f"engine.{key}"

    check_table(schema.run_model(), run, exp.source, run_path)
    run_args = {k: v for k, v in run.items() if k != "transport"}
    build_checked(RunOptions, run_args, exp.source, run_path)
    try:
        adapter = get_engine(engine)
    except ConfigError as e:
        fld = "matrix.engine" if "engine" in swept else "engine.kind"
        raise ConfigError(exp.source, fld, e.why) from None
    if adapter.option_names is not None:
        for key in options:
            if key not in adapter.option_names:
                valid = ", ".join(sorted(adapter.option_names))
                why = f"not an option of engine {engine}; valid: {valid}"
                raise ConfigError(exp.source, opt_path(key), why)
    if adapter.options_type is not None:
        names = {f.name for f in dataclasses.fields(adapter.options_type)}
        typed = {k: v for k, v in options.items() if k in names}
        check_table(fields_model(adapter.options_type), typed, exp.source, opt_path)
        build_checked(adapter.options_type, typed, exp.source, opt_path)
    try:
        adapter.check(options)
    except ConfigError as e:
        key = (e.field or "").removeprefix("engine.")
        raise ConfigError(exp.source, opt_path(key), e.why) from None
    except (TypeError, ValueError, OverflowError) as e:
        # launched engines read their options loosely (float(x), int(x)) while building argv
        why = f"bad option value for engine {engine}: {e}"
        raise ConfigError(exp.source, "engine", why) from None
