"""Read a results directory for calibration: its experiment, points, runs and per-call records.

A sweep's results directory keeps the experiment file as run (`experiment.toml`), so the trace,
the run options and each point's engine options can be rebuilt exactly. Per-call records come
from each run's `calls.parquet` (or `calls.jsonl`, if the run stopped before the table).

Restored tokens per call: the engine's own split where it reports one (`host_restore_tokens`).
llama.cpp reports only the total reuse (`cached_tokens`), so its split comes from the
whole-prompt model replayed on the run's own send and end times (`simulate_timed`), which
reproduces the server's per-call reuse (docs/llamacpp.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from replay.calibrate.fit import CallRow
from replay.counters import COMPUTED_PREFILL_TOKENS
from replay.errors import ConfigError
from replay.sweep.config import Experiment, Point, load_experiment

__all__ = [
    "ResultsDir",
    "PointRuns",
    "read_results",
    "call_rows",
    "run_load_averages",
    "RUN_TOTALS",
]

# run totals compared between measured and simulated runs (run.json summary keys)
RUN_TOTALS = (
    "makespan_s",
    "ttft_p50_s",
    "prompt_tokens",
    COMPUTED_PREFILL_TOKENS,
    "device_hit_tokens",
    "host_restore_tokens",
)


@dataclass
class PointRuns:
    point: Point
    run_dirs: list[Path]  # finished runs with status ok

    @property
    def name(self) -> str:
        return self.point.name


@dataclass
class ResultsDir:
    path: Path
    experiment: Experiment
    points: dict[str, PointRuns]


def read_results(path: str | Path) -> ResultsDir:
    """The experiment and every point's ok runs; ConfigError if this is no sweep's directory."""
    root = Path(path)
    exp_file = root / "experiment.toml"
    if not exp_file.is_file():
        raise ConfigError(
            str(root), None, "no experiment.toml: not a sweep's results directory (replay sweep)"
        )
    exp = load_experiment(exp_file, base=_experiment_dir(root))
    points: dict[str, PointRuns] = {}
    for point in exp.points():
        runs = []
        pdir = root / point.name
        for run_dir in sorted(pdir.glob("r*")) if pdir.is_dir() else []:
            try:
                status = json.loads((run_dir / "run.json").read_text()).get("status")
            except (OSError, ValueError):
                continue
            if status == "ok":
                runs.append(run_dir)
        points[point.name] = PointRuns(point, runs)
    return ResultsDir(root, exp, points)


def _experiment_dir(root: Path) -> Path | None:
    """The folder of the experiment file the sweep ran (plan.json), where the kept copy's
    relative `trace.path` and `engine.costs` were found; None when unknown."""
    try:
        where = json.loads((root / "plan.json").read_text()).get("experiment_dir")
    except (OSError, ValueError, AttributeError):
        return None
    return Path(where) if isinstance(where, str) and Path(where).is_dir() else None


def _calls(run_dir: Path) -> pd.DataFrame:
    """The run's finished calls, read as the report reads them: a torn calls.parquet falls back
    to the streamed calls.jsonl (it stopped the whole fit with a pyarrow traceback)."""
    from replay.analysis.load import load_calls

    df = load_calls(run_dir)
    if "status" not in df.columns:
        raise ConfigError(str(run_dir), "calls", "no readable calls.parquet or calls.jsonl")
    return df[df["status"] == "ok"].reset_index(drop=True)


def _llamacpp_restores(trace: Any, df: pd.DataFrame, options: dict[str, Any]) -> list[int]:
    """Per call, the reuse the whole-prompt model attributes to the RAM tier on the run's times."""
    from replay.engines.llamacpp import _state_bytes_per_token
    from replay.model.wholeprompt import WholePromptConfig, simulate_timed
    from replay.sim.personality import STATE_OVERHEAD_BYTES

    mib = options.get("cache_ram_mib")
    if mib is None:
        mib = round(float(options.get("host_tier_gib") or 0) * 1024)
    bpt = _state_bytes_per_token(options)
    if bpt is None:
        raise ConfigError("calibrate", "engine.state_bytes_per_token", "needed for this GGUF")
    config = WholePromptConfig(
        slots=int(options.get("slots", 2)),
        cache_ram_mib=int(mib),
        bytes_per_token=bpt,
        entry_overhead_bytes=STATE_OVERHEAD_BYTES,
    )
    refs = list(zip(df["task"], df["call"].astype(int), strict=True))
    events = list(zip(refs, df["t_send"], df["t_end"], strict=True))
    out = simulate_timed(trace, events, config)
    source = {c.ref: (c.cached_tokens if c.source == "ram" else 0) for c in out.calls}
    return [int(source.get(ref, 0)) for ref in refs]


def call_rows(
    run_dir: Path, engine: str, options: dict[str, Any], trace: Any
) -> tuple[list[CallRow], int]:
    """One run's finished calls as fit rows, and its total restored tokens."""
    df = _calls(run_dir)
    if engine == "llamacpp":
        restored = _llamacpp_restores(trace, df, options)
    else:  # the engine's own split, where it reports one
        col = df.get("host_restore_tokens")
        restored = [0] * len(df) if col is None else [0 if pd.isna(v) else int(v) for v in col]
    records = df.to_dict("records")
    rows = [
        CallRow(
            t_send=float(r["t_send"]),
            t_first=float(r["t_first_token"]),
            t_end=float(r["t_end"]),
            prompt_tokens=int(r["prompt_tokens"]),
            cached_tokens=0 if pd.isna(r["cached_tokens"]) else int(r["cached_tokens"]),
            restored_tokens=restored[k],
            completion_tokens=int(r["completion_tokens"]),
        )
        for k, r in enumerate(records)
    ]
    return rows, sum(restored)


def run_totals(run_dir: Path) -> dict[str, float | None]:
    """The run.json summary values compared with the simulation."""
    summary = json.loads((run_dir / "run.json").read_text()).get("summary") or {}
    return {k: summary.get(k) for k in RUN_TOTALS}


def run_load_averages(run_dir: Path) -> tuple[float | None, float | None]:
    """The 1-minute load average at the run's start and end, as its provenance recorded them
    (None for runs written before provenance carried them)."""
    prov = json.loads((run_dir / "run.json").read_text()).get("provenance") or {}

    def first(v: Any) -> float | None:
        return float(v[0]) if isinstance(v, list) and v and isinstance(v[0], int | float) else None

    return first(prov.get("load_average")), first(prov.get("load_average_end"))
