"""The validated experiment: its frozen sections, its matrix points and what each point runs.

Pure values: nothing here reads files or validates them (replay.sweep.config does, at the edge).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field

from replay.sweep import schema

__all__ = [
    "TraceSpec",
    "Timeouts",
    "Warmup",
    "PredictSpec",
    "Cluster",
    "Point",
    "Experiment",
    "point_name",
    "value_name",
    "RUN_KEYS",
    "MATRIX_KEYS",
    "ORDERS",
]

# [run] keys: the driver's RunOptions fields a TOML can set (the hook is the adapter's business).
RUN_KEYS = schema.run_keys()
# Matrix keys the sweep knows by name; any other engine option may be swept too (validated per engine).
MATRIX_KEYS = ("host_tier_gib", "pool", "admission", "kappa", "engine", "device_kv_gib")
ORDERS = ("random", "sequential")


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

    def __post_init__(self) -> None:
        # a misspelt preset was found only when the predictions were written, as a skipped
        # prediction, and predictions are written once: fixing it needed --force
        if self.model is not None:
            from replay.model.presets import get_model

            get_model(self.model)  # ConfigError listing the presets


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


def value_name(value: Any) -> str:
    """One matrix value as a point name writes it (`true`, `2` for 2.0, unsafe characters `_`)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return re.sub(r"[^A-Za-z0-9._+-]", "_", str(value))


def point_name(params: tuple[tuple[str, Any], ...]) -> str:
    """`k=v` pairs joined by `,` (docs/results.md); a point without matrix keys is `default`."""
    return ",".join(f"{k}={value_name(v)}" for k, v in params) or "default"


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
