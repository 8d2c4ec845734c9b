"""Experiment files (TOML) -> a frozen, validated `Experiment`; matrix -> `Point`s.

Every error names the file and the field (`experiments/x.toml: matrix.host_tier_gib: ...`), and
everything is checked on load, before any server starts. The file format is documented in
docs/sweeps.md; the example files are in experiments/.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from replay.errors import ConfigError
from replay.sweep import schema
from replay.sweep.schema import STRICT, build_checked, check_table, fields_model

__all__ = [
    "TraceSpec",
    "Timeouts",
    "Warmup",
    "PredictSpec",
    "Cluster",
    "Point",
    "Experiment",
    "load_experiment",
    "parse_experiment",
    "point_name",
    "toml_line",
    "RUN_KEYS",
    "MATRIX_KEYS",
]

# [run] keys: the driver's RunOptions fields a TOML can set (the hook is the adapter's business).
RUN_KEYS = schema.run_keys()
# Matrix keys the sweep knows by name; any other engine option may be swept too (validated per engine).
MATRIX_KEYS = ("host_tier_gib", "pool", "admission", "kappa", "engine", "device_kv_gib")
ORDERS = ("random", "sequential")


def _err(where: str, field: str, why: str) -> ConfigError:
    return ConfigError(where, field, why)


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

    ready_s: Annotated[float, Field(gt=0)] | None = None
    run_s: Annotated[float, Field(gt=0)] = 4 * 3600.0
    stop_grace_s: Annotated[float, Field(ge=0)] = 15.0
    scrape_interval_s: Annotated[float, Field(gt=0)] = 1.0


@dataclass(frozen=True)
class Warmup:
    """Before the replay: `requests` small completions (JIT, graphs), then a cache reset."""

    requests: Annotated[int, Field(ge=0)] = 0
    reset_cache: bool = True


@dataclass(frozen=True)
class PredictSpec:
    """Inputs of the pre-registered working-set prediction (model preset and capacities).

    Unset fields are taken from the engine options (the simulator's share the names).
    """

    enabled: bool = True
    model: str | None = None
    tp: Annotated[int, Field(ge=1)] | None = None
    device_kv_gib: Annotated[float, Field(gt=0)] | None = None
    chunk_tokens: Annotated[int, Field(ge=1)] | None = None
    block_tokens: Annotated[int, Field(ge=1)] | None = None
    # simulated closed loop of the run's pool; "trace" would mean a pool of one
    order: Literal["pool", "trace"] = "pool"


@dataclass(frozen=True)
class Cluster:
    """Where the runs execute: `local` (one after another in this process) or `ray` (each run a
    task on a Ray cluster; docs/cluster.md). `address`: "auto" joins the cluster this machine is
    part of, "local" starts a private Ray here with `local_cpus` slots, else a `ray://` or
    `host:port` address. `results`: how a finished run directory comes home ("shared": the nodes
    see the results directory at the same path; "ship": its files travel back through Ray;
    "auto": checked per run). `resources` replaces every run's request (e.g. {CPU = 4} for vLLM
    on CPU, which the adapter would ask a GPU for)."""

    backend: Literal["local", "ray"] = "local"
    address: Annotated[str, Field(min_length=1)] = "auto"
    results: Literal["auto", "shared", "ship"] = "auto"
    local_cpus: Annotated[int, Field(ge=1)] | None = None
    resources: dict[str, Annotated[float, Field(ge=0)]] | None = None


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
    cluster: Cluster = field(default_factory=Cluster)

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


class _File(BaseModel):
    """The top level; each table is checked by its own model below, with its key path."""

    model_config = STRICT
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]+$")] | None = None
    description: str = ""
    repeats: Annotated[int, Field(ge=1)] = 1
    seed: Annotated[int, Field(ge=0)] = 0
    order: Literal["random", "sequential"] = "random"
    results_dir: Annotated[str, Field(min_length=1)] = "results"
    trace: dict[str, Any]
    run: dict[str, Any] = {}
    engine: dict[str, Any]
    matrix: dict[str, Annotated[list[str | int | float | bool], Field(min_length=1)]] = {}
    timeouts: dict[str, Any] = {}
    warmup: dict[str, Any] = {}
    predict: dict[str, Any] = {}
    server: dict[str, Any] = {}
    cluster: dict[str, Any] = {}


class _Trace(BaseModel):
    model_config = STRICT
    path: Annotated[str, Field(min_length=1)] | None = None
    synth: dict[str, Any] | None = None


class _Server(BaseModel):
    model_config = STRICT
    host: Annotated[str, Field(min_length=1)] = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 0


def _parse_trace(where: str, table: Mapping[str, Any], base: Path) -> TraceSpec:
    check_table(_Trace, table, where, lambda k: f"trace.{k}")
    if ("path" in table) == ("synth" in table):
        raise _err(where, "trace", "give exactly one of trace.path or trace.synth")
    if "path" in table:
        path = Path(table["path"])
        # Relative paths are relative to the current directory (where `make` runs), as users
        # type them; fall back to the experiment file's folder.
        if not path.is_absolute() and not path.exists() and (base / path).exists():
            path = base / path
        if not path.is_file():
            raise _err(where, "trace.path", f"no such trace file: {path}")
        return TraceSpec(path=str(path))
    synth = dict(table["synth"])
    _check_synth(where, synth)
    return TraceSpec(synth=tuple(synth.items()))


def _check_synth(where: str, synth: Mapping[str, Any]) -> None:
    """`synth`'s own keyword arguments (and `fold`, a FoldSpec table), with their types; the
    preset and the fold's ranges are checked by building them."""
    from replay.trace.fold import FoldSpec
    from replay.trace.synth import get_preset
    from replay.trace.synth import synth as synth_fn

    args = schema.signature_model(synth_fn, fold=(dict[str, Any] | None, None))
    check_table(args, synth, where, lambda k: f"trace.synth.{k}")
    build_checked(get_preset, {"name": synth["preset"]}, where, lambda k: "trace.synth.preset")
    for key in ("tasks", "max_prompt_tokens", "max_calls_per_task"):
        if synth.get(key) is not None and synth[key] < 1:
            raise _err(where, f"trace.synth.{key}", f"must be >= 1, got {synth[key]!r}")
    if synth.get("fold") is not None:
        fold_path = lambda k: f"trace.synth.fold.{k}" if k else "trace.synth.fold"  # noqa: E731
        check_table(fields_model(FoldSpec), synth["fold"], where, fold_path)
        build_checked(FoldSpec, synth["fold"], where, fold_path)


def _parse_matrix(where: str, table: Mapping[str, Any]) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    out = []
    for key, values in table.items():
        fld = f"matrix.{key}"
        # two values with one point name (2 and 2.0) would share one results folder
        names = [_fmt(v) for v in values]
        if len(set(names)) != len(names):
            raise _err(where, fld, f"values repeat (as point names: {', '.join(names)})")
        if key in ("host_tier_gib", "device_kv_gib", "kappa"):
            for v in values:
                _number(where, fld, v, minimum=0)
        if key == "pool":
            for v in values:
                _number(where, fld, v, minimum=1, integer=True)
        if key == "engine":
            for v in values:
                if not isinstance(v, str):
                    raise _err(where, fld, f"values must be engine names, got {v!r}")
        out.append((key, tuple(values)))
    return tuple(out)


def parse_experiment(data: Mapping[str, Any], source: str, *, default_name: str) -> Experiment:
    """Validate a parsed TOML document; `source` names the file in errors."""
    where = source
    bad_number = schema.non_finite(data, "")
    if bad_number is not None:
        raise _err(where, bad_number, "must be a finite number")
    doc = check_table(_File, data, where, lambda k: k)
    engine_table = dict(data["engine"])
    kind = engine_table.pop("kind", None)
    if not isinstance(kind, str):
        raise _err(where, "engine.kind", "required: the engine to run (e.g. sim, vllm, sglang)")
    from replay.engines.registry import ENGINES

    overrides = []
    for key in [k for k, v in engine_table.items() if isinstance(v, Mapping) and k in ENGINES]:
        overrides.append((key, tuple(engine_table.pop(key).items())))
    run = dict(data.get("run", {}))
    check_table(schema.run_model(), run, where, lambda k: f"run.{k}")
    if "pool" not in run and "pool" not in data.get("matrix", {}):
        raise _err(where, "run.pool", "required (or sweep it in matrix.pool)")
    sections: dict[str, type] = {
        "timeouts": Timeouts,
        "warmup": Warmup,
        "predict": PredictSpec,
        "cluster": Cluster,
    }
    built = {}
    for name, cls in sections.items():
        table = data.get(name, {})
        check_table(fields_model(cls), table, where, functools.partial("{}.{}".format, name))
        built[name] = cls(**table)
    server = data.get("server", {})
    check_table(_Server, server, where, lambda k: f"server.{k}")

    exp = Experiment(
        name=doc.name or default_name,  # type: ignore[attr-defined]
        source=source,
        engine=kind,
        engine_options=tuple(engine_table.items()),
        run=tuple(run.items()),
        engine_overrides=tuple(overrides),
        trace=_parse_trace(where, data["trace"], Path(source).parent),
        matrix=_parse_matrix(where, data.get("matrix", {})),
        repeats=data.get("repeats", 1),
        seed=data.get("seed", 0),
        order=data.get("order", "random"),
        results_dir=str(data.get("results_dir", "results")),
        description=str(data.get("description", "")),
        timeouts=built["timeouts"],
        warmup=built["warmup"],
        predict=built["predict"],
        host=server.get("host", "127.0.0.1"),
        port=server.get("port", 0),
        cluster=built["cluster"],
    )
    if not re.fullmatch(r"[A-Za-z0-9._-]+", exp.name):
        raise _err(where, "name", f"must be letters, digits, '.', '_' or '-', got {exp.name!r}")
    _validate_points(exp)
    return exp


def _validate_points(exp: Experiment) -> None:
    """Every point, before anything starts (a bad value would otherwise fail each run)."""
    for point in exp.points():
        _check_point(exp, point)


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
        raise _err(exp.source, fld, e.why) from None
    if adapter.option_names is not None:
        for key in options:
            if key not in adapter.option_names:
                valid = ", ".join(sorted(adapter.option_names))
                why = f"not an option of engine {engine}; valid: {valid}"
                raise _err(exp.source, opt_path(key), why)
    if adapter.options_type is not None:
        names = {f.name for f in dataclasses.fields(adapter.options_type)}
        typed = {k: v for k, v in options.items() if k in names}
        check_table(fields_model(adapter.options_type), typed, exp.source, opt_path)
        build_checked(adapter.options_type, typed, exp.source, opt_path)
    try:
        adapter.check(options)
    except ConfigError as e:
        key = (e.field or "").removeprefix("engine.")
        raise _err(exp.source, opt_path(key), e.why) from None
    except (TypeError, ValueError, OverflowError) as e:
        # launched engines read their options loosely (float(x), int(x)) while building argv
        raise _err(exp.source, "engine", f"bad option value for engine {engine}: {e}") from None


def load_experiment(path: str | Path) -> Experiment:
    """Read and validate an experiment file; every problem is a ConfigError naming the field,
    and the line where the file sets it when there is one (`FILE:LINE: key.path: why`)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        why = getattr(e, "strerror", None) or str(e)
        raise ConfigError(str(p), None, f"cannot read experiment file: {why}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        at = re.search(r"at line (\d+)", str(e))
        where = f"{p}:{at.group(1)}" if at else str(p)
        raise ConfigError(where, None, f"not valid TOML: {e}") from None
    try:
        return parse_experiment(data, str(p), default_name=p.stem)
    except ConfigError as e:
        line = toml_line(text, e.field or "")
        if line is None or e.where != str(p):
            raise
        raise ConfigError(f"{p}:{line}", e.field, e.why) from None


_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?")
_KEY = re.compile(r"^\s*([A-Za-z0-9_.\"-]+?)\s*=")


def toml_line(text: str, key_path: str) -> int | None:
    """The 1-based line that sets `key_path` (or the nearest table or key above it that holds
    it, such as an inline table), or None. tomllib keeps no positions, so this reads the lines:
    `[table]` headers and `key =` lines; good enough to point at, never used for meaning."""
    want = key_path.split(".") if key_path else []
    best: tuple[int, int] | None = None  # (matched depth, line)
    table: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        header = _HEADER.match(line)
        if header:
            table = [k.strip().strip('"') for k in header.group(1).split(".")]
            path = table
        else:
            key = _KEY.match(line)
            if not key:
                continue
            path = table + [k.strip('"') for k in key.group(1).split(".")]
        if path and path == want[: len(path)] and (best is None or len(path) > best[0]):
            best = (len(path), number)
    return None if best is None else best[1]
