"""Experiment files (TOML) -> a frozen, validated `Experiment` (replay.sweep.experiment).

Every error names the file and the field (`experiments/x.toml: matrix.host_tier_gib: ...`), and
everything is checked on load, before any server starts. The file format is documented in
docs/sweeps.md; the example files are in experiments/. The experiment's types are re-exported
here, so `from replay.sweep.config import Experiment` keeps working.
"""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from replay.errors import ConfigError
from replay.sweep import schema
from replay.sweep.config_checks import check_points, check_synth, parse_matrix
from replay.sweep.experiment import (
    MATRIX_KEYS,
    ORDERS,
    RUN_KEYS,
    Cluster,
    Experiment,
    Point,
    PredictSpec,
    Timeouts,
    TraceSpec,
    Warmup,
    point_name,
)
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
    "experiment_from_text",
    "parse_experiment",
    "point_name",
    "toml_line",
    "RUN_KEYS",
    "MATRIX_KEYS",
    "ORDERS",
]


class _File(BaseModel):
    """The top level; each table is checked by its own model below, with its key path."""

    model_config = STRICT
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]+$")] | None = None
    description: str = ""
    repeats: Annotated[int, Field(ge=1, le=10_000)] = 1  # the plan lists every run up front
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


def _found(path: Path, base: Path) -> Path:
    """A file an experiment names: relative to the current directory (where `make` runs), as
    users type paths, else to the experiment file's folder `base` when it is there."""
    if not path.is_absolute() and not path.exists() and (base / path).exists():
        return base / path
    return path


def _costs_beside(table: Mapping[str, Any], base: Path) -> dict[str, Any]:
    """`costs` (a calibrated costs file) found as `trace.path` is (a sweep run from elsewhere
    could not find experiments/costs/... and failed every point)."""
    out = dict(table)
    costs = out.get("costs")
    if isinstance(costs, str) and costs:
        given = Path(costs)
        found = _found(given, base)
        if found is not given:  # as written unless it was found beside the file
            out["costs"] = str(found)
    return out


def _parse_trace(where: str, table: Mapping[str, Any], base: Path) -> TraceSpec:
    check_table(_Trace, table, where, lambda k: f"trace.{k}")
    if ("path" in table) == ("synth" in table):
        raise ConfigError(where, "trace", "give exactly one of trace.path or trace.synth")
    if "path" in table:
        path = _found(Path(table["path"]), base)
        if path.is_dir():
            raise ConfigError(where, "trace.path", f"{path} is a directory; name a trace file")
        if not path.is_file():
            # the scaled WEKA traces of the real-engine experiments are built, not committed
            hint = (
                "; `make weka-traces` writes it"
                if path.name.startswith("weka-") and (".cache/traces" in path.as_posix())
                else ""
            )
            raise ConfigError(where, "trace.path", f"no such trace file: {path}{hint}")
        return TraceSpec(path=str(path))
    synth = dict(table["synth"])
    check_synth(where, synth)
    return TraceSpec(synth=tuple(synth.items()))


def parse_experiment(
    data: Mapping[str, Any], source: str, *, default_name: str, base: Path | None = None
) -> Experiment:
    """Validate a parsed TOML document; `source` names the file in errors. Paths it names are
    also looked for in `base` (default: `source`'s folder; a results folder's kept copy is
    read with the folder of the file it was copied from)."""
    where = source
    bad = schema.bad_number(data, "")
    if bad is not None:
        raise ConfigError(where, *bad)
    doc = check_table(_File, data, where, lambda k: k)
    engine_table = dict(data["engine"])
    kind = engine_table.pop("kind", None)
    if kind is None:
        raise ConfigError(
            where, "engine.kind", "required: the engine to run (e.g. sim, vllm, sglang)"
        )
    if not isinstance(kind, str):
        raise ConfigError(
            where, "engine.kind", f"must be an engine name (e.g. sim, vllm, sglang), got {kind!r}"
        )
    from replay.engines.registry import ENGINES

    base = Path(source).parent if base is None else base
    engine_table = _costs_beside(engine_table, base)
    overrides = []
    for key in [k for k, v in engine_table.items() if isinstance(v, Mapping) and k in ENGINES]:
        overrides.append((key, tuple(_costs_beside(engine_table.pop(key), base).items())))
        names = ENGINES[key].option_names
        unknown = sorted(k for k, _ in overrides[-1][1] if names is not None and k not in names)
        if unknown:  # checked here too: a table of an engine no point runs was never read
            raise ConfigError(
                where, f"engine.{key}.{unknown[0]}",
                f"not an option of engine {key}; valid: {', '.join(sorted(names or ()))}",
            )  # fmt: skip
    run = dict(data.get("run", {}))
    check_table(schema.run_model(), run, where, lambda k: f"run.{k}")
    if "pool" not in run and "pool" not in data.get("matrix", {}):
        raise ConfigError(where, "run.pool", "required (or sweep it in matrix.pool)")
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
        built[name] = build_checked(cls, table, where, functools.partial("{}.{}".format, name))
    server = data.get("server", {})
    check_table(_Server, server, where, lambda k: f"server.{k}")

    exp = Experiment(
        name=doc.name or default_name,  # type: ignore[attr-defined]
        source=source,
        engine=kind,
        engine_options=tuple(engine_table.items()),
        run=tuple(run.items()),
        engine_overrides=tuple(overrides),
        trace=_parse_trace(where, data["trace"], base),
        matrix=parse_matrix(where, data.get("matrix", {})),
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
    if not re.fullmatch(r"[A-Za-z0-9._-]+", exp.name) or exp.name in (".", ".."):
        raise ConfigError(
            where,
            "name",
            f"must be letters, digits, '.', '_' or '-' (and not '.' or '..', which name the "
            f"results root or its parent), got {exp.name!r}",
        )
    check_points(exp)
    return exp


def load_experiment(path: str | Path, base: Path | None = None) -> Experiment:
    """Read and validate an experiment file; every problem is a ConfigError naming the field,
    and the line where the file sets it when there is one (`FILE:LINE: key.path: why`).
    `base`: where relative paths are also looked for (see `parse_experiment`)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        why = getattr(e, "strerror", None) or str(e)
        raise ConfigError(str(p), None, f"cannot read experiment file: {why}") from None
    return experiment_from_text(text, p, base)


def experiment_from_text(text: str, path: str | Path, base: Path | None = None) -> Experiment:
    """`load_experiment` of `text`, the contents of the experiment file `path` (which need not
    exist yet: `replay run --repeats` checks its file before it writes it)."""
    p = Path(path)
    if text.startswith("\ufeff"):
        raise ConfigError(
            f"{p}:1", None, "starts with a UTF-8 byte-order mark, which the TOML reader does not accept; save "
            "the file as UTF-8 without BOM",
        )  # fmt: skip
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        at = re.search(r"at line (\d+)", str(e))
        where = f"{p}:{at.group(1)}" if at else str(p)
        raise ConfigError(where, None, f"not valid TOML: {e}") from None
    try:
        return parse_experiment(data, str(p), default_name=p.stem, base=base)
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
