"""Experiment files (TOML) -> a frozen, validated `Experiment`; matrix -> `Point`s.

Every error names the file and the field (`experiments/x.toml: matrix.host_tier_gib: ...`), and
everything is checked on load, before any server starts. The file format is documented in
docs/sweeps.md; the example files are in experiments/.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from replay.errors import ConfigError

__all__ = [
    "TraceSpec",
    "Timeouts",
    "Warmup",
    "PredictSpec",
    "Point",
    "Experiment",
    "load_experiment",
    "parse_experiment",
    "point_name",
    "RUN_KEYS",
    "MATRIX_KEYS",
]

TOP_KEYS = {
    "name", "description", "repeats", "seed", "order", "results_dir",
    "trace", "run", "engine", "matrix", "timeouts", "warmup", "predict", "server",
}  # fmt: skip
# [run] keys: the driver's RunOptions fields a TOML can set (the hook is the adapter's business).
RUN_KEYS = frozenset({
    "pool", "gap_scale", "timing", "on_error", "strict", "max_inflight", "max_rps",
    "request_timeout_s", "connect_timeout_s", "server_gone_grace_s", "interrupt_grace_s",
    "progress", "forcing", "truncate_prompt_tokens", "drift_warn_s", "transport",
})  # fmt: skip
# Matrix keys the sweep knows by name; any other engine option may be swept too (validated per engine).
MATRIX_KEYS = ("host_tier_gib", "pool", "admission", "kappa", "engine", "device_kv_gib")
ORDERS = ("random", "sequential")
_SCALAR = (str, int, float, bool)


def _err(where: str, field: str, why: str) -> ConfigError:
    return ConfigError(where, field, why)


def _check_keys(where: str, prefix: str, table: Mapping[str, Any], allowed: set[str] | frozenset):
    for key in table:
        if key not in allowed:
            valid = ", ".join(sorted(allowed))
            raise _err(where, f"{prefix}{key}", f"unknown key; valid: {valid}")


def _number(where: str, fld: str, value: Any, *, minimum: float, integer: bool = False) -> Any:
    ok_type = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, ok_type) or value < minimum:
        kind = "an integer" if integer else "a number"
        raise _err(where, fld, f"must be {kind} >= {minimum}, got {value!r}")
    return value


@dataclass(frozen=True)
class TraceSpec:
    """Where the trace comes from: a file (`path`) or the seeded generator (`synth` keywords)."""

    path: str | None = None
    synth: tuple[tuple[str, Any], ...] | None = None

    def describe(self) -> str:
        if self.path is not None:
            return self.path
        return "synth(" + ", ".join(f"{k}={v!r}" for k, v in self.synth or ()) + ")"


@dataclass(frozen=True)
class Timeouts:
    """Seconds: server readiness (None: the adapter's default), whole run, stop grace, scrape."""

    ready_s: float | None = None
    run_s: float = 4 * 3600.0
    stop_grace_s: float = 15.0
    scrape_interval_s: float = 1.0


@dataclass(frozen=True)
class Warmup:
    """Before the replay: `requests` small completions (JIT, graphs), then a cache reset."""

    requests: int = 0
    reset_cache: bool = True


@dataclass(frozen=True)
class PredictSpec:
    """Inputs of the pre-registered working-set prediction (model preset and capacities).

    Unset fields are taken from the engine options (the simulator's share the names).
    """

    enabled: bool = True
    model: str | None = None
    tp: int | None = None
    device_kv_gib: float | None = None
    chunk_tokens: int | None = None
    block_tokens: int | None = None
    order: str = "pool"  # simulated closed loop of the run's pool; "trace" would mean a pool of one


@dataclass(frozen=True)
class Point:
    """One configuration of the matrix: its values in the matrix's key order."""

    params: tuple[tuple[str, Any], ...]

    @property
    def name(self) -> str:
        return point_name(self.params)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.params)


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return re.sub(r"[^A-Za-z0-9._+-]", "_", str(value))


def point_name(params: tuple[tuple[str, Any], ...]) -> str:
    """`k=v` pairs joined by `,` (docs/results.md); a point without matrix keys is `default`."""
    return ",".join(f"{k}={_fmt(v)}" for k, v in params) or "default"


@dataclass(frozen=True)
class Experiment:
    """A validated experiment file. `engine_options` excludes `kind`; matrix values override it."""

    name: str
    source: str
    engine: str
    engine_options: tuple[tuple[str, Any], ...]
    run: tuple[tuple[str, Any], ...]
    trace: TraceSpec
    # [engine.<kind>] tables: options for that engine only (when the matrix sweeps `engine`)
    engine_overrides: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()
    matrix: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    repeats: int = 1
    seed: int = 0
    order: str = "random"
    results_dir: str = "results"
    description: str = ""
    timeouts: Timeouts = field(default_factory=Timeouts)
    warmup: Warmup = field(default_factory=Warmup)
    predict: PredictSpec = field(default_factory=PredictSpec)
    host: str = "127.0.0.1"
    port: int = 0

    def points(self) -> list[Point]:
        """Every combination of the matrix values, in the file's key and value order."""
        keys = [k for k, _ in self.matrix]
        combos = itertools.product(*(values for _, values in self.matrix))
        return [Point(tuple(zip(keys, combo, strict=True))) for combo in combos]

    def resolve(self, point: Point) -> tuple[str, dict[str, Any], dict[str, Any]]:
        """(engine kind, engine options, run options) of one point: matrix values override the
        file's; `engine` picks the adapter, run keys go to the driver, the rest to the engine."""
        engine = self.engine
        options = dict(self.engine_options)
        run = dict(self.run)
        for key, value in point.params:
            if key == "engine":
                engine = value
        options.update(dict(dict(self.engine_overrides).get(engine, ())))
        for key, value in point.params:
            if key == "engine":
                continue
            if key in RUN_KEYS:
                run[key] = value
            else:
                options[key] = value
        return engine, options, run


def _table(where: str, data: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, Mapping):
        raise _err(where, key, "must be a table")
    return dict(value)


def _parse_trace(where: str, data: Mapping[str, Any], base: Path) -> TraceSpec:
    table = _table(where, data, "trace")
    _check_keys(where, "trace.", table, {"path", "synth"})
    if ("path" in table) == ("synth" in table):
        raise _err(where, "trace", "give exactly one of trace.path or trace.synth")
    if "path" in table:
        if not isinstance(table["path"], str) or not table["path"]:
            raise _err(where, "trace.path", "must be a file path")
        path = Path(table["path"])
        # Relative paths are relative to the current directory (where `make` runs), as users
        # type them; fall back to the experiment file's folder.
        if not path.is_absolute() and not path.exists() and (base / path).exists():
            path = base / path
        return TraceSpec(path=str(path))
    synth = table["synth"]
    if not isinstance(synth, Mapping) or "preset" not in synth:
        raise _err(where, "trace.synth", "must be a table with at least `preset` (and tasks, seed)")
    return TraceSpec(synth=tuple(synth.items()))


def _parse_matrix(where: str, data: Mapping[str, Any]) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    table = _table(where, data, "matrix")
    out = []
    for key, values in table.items():
        fld = f"matrix.{key}"
        if not isinstance(values, list) or not values:
            raise _err(where, fld, "must be a non-empty list of values")
        for v in values:
            if not isinstance(v, _SCALAR):
                raise _err(where, fld, f"values must be strings or numbers, got {v!r}")
        if len(set(map(repr, values))) != len(values):
            raise _err(where, fld, "values repeat")
        if key in ("host_tier_gib", "device_kv_gib", "kappa"):
            for v in values:
                _number(where, fld, v, minimum=0)
        if key == "pool":
            for v in values:
                _number(where, fld, v, minimum=1, integer=True)
        out.append((key, tuple(values)))
    return tuple(out)


def _dataclass_from(where: str, prefix: str, cls: Any, table: Mapping[str, Any]) -> Any:
    allowed = {f.name for f in dataclasses.fields(cls)}
    _check_keys(where, prefix, table, allowed)
    return cls(**table)


def parse_experiment(data: Mapping[str, Any], source: str, *, default_name: str) -> Experiment:
    """Validate a parsed TOML document; `source` names the file in errors."""
    where = source
    _check_keys(where, "", data, TOP_KEYS)
    name = data.get("name", default_name)
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9._-]+", name):
        raise _err(where, "name", f"must be letters, digits, '.', '_' or '-', got {name!r}")
    repeats = _number(where, "repeats", data.get("repeats", 1), minimum=1, integer=True)
    seed = _number(where, "seed", data.get("seed", 0), minimum=0, integer=True)
    order = data.get("order", "random")
    if order not in ORDERS:
        raise _err(where, "order", f"must be one of {', '.join(ORDERS)}, got {order!r}")

    engine_table = _table(where, data, "engine")
    kind = engine_table.pop("kind", None)
    if not isinstance(kind, str):
        raise _err(where, "engine.kind", "required: the engine to run (e.g. sim, vllm, sglang)")
    from replay.engines.registry import ENGINES

    overrides = []
    for key in [k for k, v in engine_table.items() if isinstance(v, Mapping) and k in ENGINES]:
        overrides.append((key, tuple(engine_table.pop(key).items())))
    run = _table(where, data, "run")
    _check_keys(where, "run.", run, RUN_KEYS)
    if "pool" not in run and "pool" not in _table(where, data, "matrix"):
        raise _err(where, "run.pool", "required (or sweep it in matrix.pool)")
    if "pool" in run:
        _number(where, "run.pool", run["pool"], minimum=1, integer=True)

    timeouts_t = _table(where, data, "timeouts")
    warmup_t = _table(where, data, "warmup")
    predict_t = _table(where, data, "predict")
    server_t = _table(where, data, "server")
    _check_keys(where, "server.", server_t, {"host", "port"})
    for k, v in timeouts_t.items():
        _number(where, f"timeouts.{k}", v, minimum=0)
    if "requests" in warmup_t:
        _number(where, "warmup.requests", warmup_t["requests"], minimum=0, integer=True)
    port = server_t.get("port", 0)
    _number(where, "server.port", port, minimum=0, integer=True)
    host = server_t.get("host", "127.0.0.1")
    if not isinstance(host, str):
        raise _err(where, "server.host", "must be a host name or address")

    exp = Experiment(
        name=name,
        source=source,
        engine=kind,
        engine_options=tuple(engine_table.items()),
        run=tuple(run.items()),
        engine_overrides=tuple(overrides),
        trace=_parse_trace(where, data, Path(source).parent),
        matrix=_parse_matrix(where, data),
        repeats=repeats,
        seed=seed,
        order=order,
        results_dir=str(data.get("results_dir", "results")),
        description=str(data.get("description", "")),
        timeouts=_dataclass_from(where, "timeouts.", Timeouts, timeouts_t),
        warmup=_dataclass_from(where, "warmup.", Warmup, warmup_t),
        predict=_dataclass_from(where, "predict.", PredictSpec, predict_t),
        host=host,
        port=port,
    )
    _validate_points(exp)
    return exp


def _validate_points(exp: Experiment) -> None:
    """Each point's engine exists and accepts its options; run options build (before any run)."""
    from replay.engines.registry import get_engine

    for point in exp.points():
        engine, options, run = exp.resolve(point)
        try:
            adapter = get_engine(engine)
        except ConfigError as e:
            fld = "matrix.engine" if any(k == "engine" for k, _ in point.params) else "engine.kind"
            raise _err(exp.source, fld, e.why) from None
        if adapter.option_names is not None:
            for key in options:
                if key not in adapter.option_names:
                    fld = f"matrix.{key}" if key in dict(point.params) else f"engine.{key}"
                    valid = ", ".join(sorted(adapter.option_names))
                    raise _err(exp.source, fld, f"not an option of engine {engine}; valid: {valid}")
        if "pool" not in run:
            raise _err(exp.source, "run.pool", "required (or sweep it in matrix.pool)")
        if engine in ("sim", "sim-server"):
            _validate_sim(exp, point, options)
        else:
            try:
                adapter.launch(options, exp.host, exp.port or 8000)
            except ConfigError as e:
                raise _err(exp.source, e.field or "engine", e.why) from None


_SIM_EXTRA = frozenset({"python", "extra_args", "env", "ready_timeout_s"})


def _validate_sim(exp: Experiment, point: Point, options: dict[str, Any]) -> None:
    """Simulator options must be SimConfig fields with valid values (checked by SimConfig)."""
    try:
        from replay.sim.options import SimConfig
    except ModuleNotFoundError:
        return
    names = set(SimConfig.__dataclass_fields__)
    for key in options:
        if key not in names and key not in _SIM_EXTRA:
            fld = f"matrix.{key}" if key in dict(point.params) else f"engine.{key}"
            raise _err(
                exp.source, fld, f"not a simulator option; valid: {', '.join(sorted(names))}"
            )
    try:
        SimConfig.from_options(**{k: v for k, v in options.items() if k in names})
    except ConfigError as e:
        key = (e.field or "").removeprefix("--").replace("-", "_")
        fld = f"matrix.{key}" if key in dict(point.params) else f"engine.{key or '-'}"
        raise _err(exp.source, fld, e.why) from None
    except (TypeError, ValueError) as e:
        raise _err(exp.source, "engine", f"bad simulator option value: {e}") from None


def load_experiment(path: str | Path) -> Experiment:
    """Read and validate an experiment file; every problem is a ConfigError naming the field."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(str(p), None, f"cannot read experiment file: {e.strerror or e}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(str(p), None, f"not valid TOML: {e}") from None
    return parse_experiment(data, str(p), default_name=p.stem)
