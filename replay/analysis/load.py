"""Read a results directory (docs/results.md) into one table with one row per run.

Tolerant by contract: a run that stopped half way, a missing or unreadable `run.json`, a
`counters.json` that lacks a counter: each still gives a row, with `status` saying what happened
and `null` where a number is unknown. Nothing here writes files.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pandas as pd

from replay.errors import ConfigError
from replay.status import RunStatus

__all__ = [
    "RUN_STATUSES_OK",
    "Results",
    "find_key",
    "load_calls",
    "load_results",
    "parse_point_name",
]

RUN_STATUSES_OK = (RunStatus.OK,)
# Provenance facts the report shows; looked up by key anywhere in run.json's provenance.
PROVENANCE_KEYS = {
    "engine_version": ("engine_version", "server_version"),
    "gpu": ("gpu", "gpu_name", "gpus"),
    "trace_sha256": ("trace_sha256", "sha256"),
    "git_revision": ("git_revision", "git_rev", "revision", "git"),
    "host": ("host", "hostname"),
    "node": ("node",),  # where a sweep ran the run (a cluster names its node)
    "started_at": ("started_at",),
    "ended_at": ("ended_at",),
    "clock": ("clock",),  # virtual (in-process simulator) or wall
}
_RUN_MARKERS = ("run.json", "calls.jsonl", "calls.parquet", "counters.json")


@dataclass(frozen=True)
class Results:
    """A loaded results directory: the run table plus the sweep-level files, as found."""

    root: Path
    experiment: str
    runs: pd.DataFrame  # one row per run; see `load_results`
    params: tuple[str, ...]  # matrix parameters, in the matrix's key order
    predictions: Any | None = None  # predictions.json as parsed, or None
    experiment_toml: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)  # what the loader had to skip or guess
    planned: tuple[str, ...] = ()  # every planned `<point>/<repeat>` (plan.json); () if unknown
    left_out: tuple[tuple[str, str], ...] = ()  # (`<point>/<repeat>`, why) of foreign run folders

    @property
    def not_started(self) -> list[str]:
        """Planned runs with no run directory: a sweep stopped (or still running) before them.
        A folder left out as another sweep's run is not counted here (it is in `left_out`)."""
        have = {f"{p}/{r}" for p, r in zip(self.runs["point"], self.runs["repeat"], strict=True)}
        have |= {rel for rel, _ in self.left_out}
        return [rel for rel in self.planned if rel not in have]

    def ok_runs(self, statuses: Iterable[str] = RUN_STATUSES_OK) -> pd.DataFrame:
        return self.runs[self.runs["status"].isin(tuple(statuses))]


def parse_point_name(name: str) -> dict[str, Any]:
    """`host_tier_gib=5,admission=all` -> {"host_tier_gib": 5, "admission": "all"} (numbers coerced)."""
    out: dict[str, Any] = {}
    for part in name.split(","):
        if "=" not in part:
            continue
        key, _, raw = part.partition("=")
        out[key.strip()] = _coerce(raw.strip())
    return out


def _coerce(raw: str) -> Any:
    low = raw.lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(raw)
        except ValueError:
            pass
    return raw


def find_key(obj: Any, names: Iterable[str]) -> Any | None:
    """First non-empty value under any of `names`, searched depth-first through nested dicts."""
    names = tuple(names)
    if isinstance(obj, Mapping):
        for name in names:
            value = obj.get(name)
            if value not in (None, "", [], {}) and not isinstance(value, Mapping):
                return value
        for value in obj.values():
            found = find_key(value, names)
            if found is not None:
                return found
    elif isinstance(obj, list):
        for value in obj:
            found = find_key(value, names)
            if found is not None:
                return found
    return None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _read_json(path: Path) -> tuple[Any | None, str | None]:
    try:
        return orjson.loads(path.read_bytes()), None
    except FileNotFoundError:
        return None, None
    except (OSError, orjson.JSONDecodeError) as e:
        return None, f"{path.name}: unreadable ({e})"


# summary keys that hold numbers, by their unit or their name (docs/results.md)
_NUMERIC_KEY = re.compile(r"(_s|_ms|_tokens|_bytes|_gib|_fraction|_ratio|_rate|_per_s)$|^calls_")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _run_dirs(root: Path) -> list[Path]:
    """Run directories: `root` itself, or `<point>/<repeat>/` below it."""
    if any((root / m).exists() for m in _RUN_MARKERS):
        return [root]
    found = []
    for point_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        if point_dir.name == "figures" or point_dir.name.startswith("."):
            continue
        for repeat_dir in sorted(p for p in point_dir.iterdir() if p.is_dir()):
            if any((repeat_dir / m).exists() for m in _RUN_MARKERS):
                found.append(repeat_dir)
    return found


def _repeat_order(name: str) -> tuple[int, str]:
    digits = name.lstrip("r")
    return (int(digits), name) if digits.isdigit() else (1 << 30, name)


def _unreadable_parquet(path: Path) -> str | None:
    """Why a parquet file's footer does not read (a file cut short), or None (also when absent).
    The footer alone: reading every run's calls to check them would cost the report its speed."""
    if not path.is_file():
        return None
    import pyarrow.parquet as pq  # only when there is a file (pandas' parquet engine)

    try:
        pq.read_metadata(path)
    except (OSError, ValueError) as e:
        return str(e).splitlines()[0] if str(e) else type(e).__name__
    return None


def _read_run(run_dir: Path, root: Path) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """One run's row, its matrix point (dict) and any notes about what was unreadable."""
    notes: list[str] = []
    rel = run_dir.relative_to(root) if run_dir != root else Path(".")
    row: dict[str, Any] = {"run_dir": str(run_dir)}
    run, run_err = _read_json(run_dir / "run.json")
    if run is not None and not isinstance(run, dict):
        run_err = f"run.json: unreadable (a JSON {type(run).__name__}, not an object)"
    if run_err:
        notes.append(f"{rel}/{run_err}")
    counters, err = _read_json(run_dir / "counters.json")
    if err:
        notes.append(f"{rel}/{err}")
    broken = _unreadable_parquet(run_dir / "calls.parquet")
    if broken:  # load_calls falls back on the streamed calls.jsonl: say so, once, here
        notes.append(f"{rel}/calls.parquet: unreadable ({broken}); its calls come from calls.jsonl")

    if run_dir == root:
        point_name, repeat = "", "r0"
    else:
        point_name, repeat = run_dir.parent.name, run_dir.name
    run = run if isinstance(run, dict) else {}
    point = _dict(run.get("point")) or parse_point_name(point_name)
    row["point"] = point_name or ",".join(f"{k}={v}" for k, v in point.items())
    recorded_repeat = run.get("repeat")
    if isinstance(recorded_repeat, int) and not isinstance(recorded_repeat, bool):
        repeat = f"r{recorded_repeat}"
    elif isinstance(recorded_repeat, str) and recorded_repeat:
        repeat = recorded_repeat
    row["repeat"] = repeat
    row["experiment"] = run.get("experiment") if isinstance(run.get("experiment"), str) else None
    if run:
        row["status"] = str(run.get("status") or "unknown")
    elif (run_dir / "run.json").exists():
        row["status"] = "unreadable"
        row["error"] = run_err  # the report's "why" column
    else:
        row["status"] = "incomplete"  # stopped before run.json was written
    server = _dict(run.get("server"))
    # Only where a writer puts the reason: nested dicts hold unrelated "error"-like fields.
    row["error"] = next(
        (v for v in (run.get("reason"), run.get("error"), server.get("reason")) if v),
        row.get("error"),
    )
    row["log_tail"] = server.get("log_tail") or run.get("log_tail")
    row["engine"] = run.get("engine") if isinstance(run.get("engine"), str) else None
    if row["engine"] is None:  # a single run's: what `replay run` recorded of its engine
        engine = _dict(run.get("provenance")).get("engine")
        row["engine"] = engine if isinstance(engine, str) else None
    if row["engine"] is None:
        row["engine"] = find_key(run.get("config", {}), ("engine", "engine_kind"))
    summary = _dict(run.get("summary"))
    for key, value in summary.items():
        if isinstance(value, (dict, list)):
            continue
        if _NUMERIC_KEY.search(key) and value is not None and not _is_number(value):
            # a hand-edited or foreign run.json: the report averages these columns
            notes.append(f"{rel}/run.json: summary.{key}: not a number ({value!r}); left out")
            value = None
        row[key] = value
    if isinstance(counters, dict):
        flat = _dict(counters.get("counters")) or counters
        for key, value in flat.items():
            # counters.json is the scrape of record for HTTP engines; None means "not exposed".
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                row[key] = value
            elif value is None:
                row.setdefault(key, None)
            else:  # a hand-edited or foreign counters.json: said, as a summary field's is
                notes.append(f"{rel}/counters.json: {key}: not a number ({value!r}); left out")
    provenance = _dict(run.get("provenance"))
    for column, names in PROVENANCE_KEYS.items():
        value = find_key(provenance, names) or find_key(run, names)
        row[column] = ", ".join(map(str, value)) if isinstance(value, list) else value
    row["provenance"] = provenance
    return row, point, notes


def load_results(results_dir: str | Path) -> Results:
    """Load `results/<experiment>/` (or a single run directory) into a `Results`.

    Rows: one per run, columns `experiment`, `point`, `repeat`, `status`, one per matrix parameter,
    every `summary` key, every counter of `counters.json`, and provenance facts. Runs come from the
    run directories; when there are none, from `summary.parquet`/`summary.csv`.
    """
    root = Path(results_dir)
    if not root.is_dir():
        raise ConfigError(str(root), None, "no such results directory (run `replay sweep` first)")
    notes: list[str] = []
    predictions, err = _read_json(root / "predictions.json")
    if err:
        notes.append(err)
    plan, err = _read_json(root / "plan.json")  # written by the sweep before its first run
    if err:
        notes.append(err)
    planned = tuple(str(r) for r in _dict(plan).get("runs") or () if isinstance(r, str))
    toml_path = root / "experiment.toml"
    experiment_toml = toml_path.read_text(errors="replace") if toml_path.is_file() else None

    rows: list[dict[str, Any]] = []
    params: list[str] = []
    left_out: list[tuple[str, str]] = []
    for run_dir in _run_dirs(root):
        row, point, run_notes = _read_run(run_dir, root)
        notes.extend(run_notes)
        foreign = _foreign(row, point, run_dir, root, _dict(plan), planned)
        if foreign:
            notes.append(f"{run_dir.relative_to(root)}: left out: {foreign}")
            left_out.append((run_dir.relative_to(root).as_posix(), foreign))
            continue
        for key, value in point.items():
            if key not in params:
                params.append(key)
            row[key] = value
        rows.append(row)
    if rows:
        runs = pd.DataFrame(rows)
    else:
        table = _summary_table(root)
        if table is None and planned:
            raise ConfigError(
                str(root), None, f"no runs found: plan.json lists {len(planned)} and none has "
                "started (the sweep stopped before its first run; run it again to resume)",
            )  # fmt: skip
        if table is None:
            raise ConfigError(
                str(root), None, "no runs found (no <point>/<repeat>/run.json, no summary.parquet)"
            )
        runs = table
        notes.append("runs read from the summary table (no run directories)")
        if (root / "summary.csv").is_file() and not (root / "summary.parquet").is_file():
            runs, torn = _whole_csv_rows(root / "summary.csv", runs)
            notes += [torn] if torn else []
        planned = ()  # no run directories to tell started runs from the rest
        params = _matrix_from_summary(runs)
    experiment = _experiment_name(root, runs)
    runs["experiment"] = experiment
    if "repeat" in runs:
        runs["_order"] = runs["repeat"].astype(str).map(_repeat_order)
        runs = runs.sort_values(["point", "_order"], kind="stable").drop(columns="_order")
    runs = runs.reset_index(drop=True)
    return Results(
        root=root,
        experiment=experiment,
        runs=runs,
        params=tuple(params),
        predictions=predictions,
        experiment_toml=experiment_toml,
        notes=tuple(notes),
        planned=planned,
        left_out=tuple(left_out),
    )


def _foreign(
    row: dict[str, Any],
    point: dict[str, Any],
    run_dir: Path,
    root: Path,
    plan: dict[str, Any],
    planned: tuple[str, ...],
) -> str | None:
    """Why a run directory of a sweep's layout is not one of this sweep's runs (copied in from
    another experiment, another point or repeat, another trace), or None. Pooling it would put
    another workload's numbers into this point's mean and interval without a word."""
    if run_dir == root:
        return None
    rel = f"{run_dir.parent.name}/{run_dir.name}"
    if planned and rel not in planned:
        return "plan.json lists no such run (copied from elsewhere?)"
    run_exp, plan_exp = row.get("experiment"), plan.get("experiment")
    if isinstance(run_exp, str) and isinstance(plan_exp, str) and run_exp != plan_exp:
        return f"its run.json is experiment {run_exp!r}'s, not {plan_exp!r}'s"
    folder = parse_point_name(run_dir.parent.name)
    if point and {k: str(v) for k, v in point.items()} != {k: str(v) for k, v in folder.items()}:
        named = ",".join(f"{k}={v}" for k, v in point.items())
        return f"its run.json is point {named}'s, not the folder's"
    if re.fullmatch(r"r\d+", run_dir.name) and row.get("repeat") != run_dir.name:
        return f"its run.json is repeat {row.get('repeat')}'s, not the folder's"
    sha, plan_sha = row.get("trace_sha256"), plan.get("trace_sha256")
    if isinstance(sha, str) and isinstance(plan_sha, str) and sha != plan_sha:
        return f"it replayed trace {sha[:12]}..., the sweep's is {plan_sha[:12]}..."
    return None


def _experiment_name(root: Path, runs: pd.DataFrame) -> str:
    if "experiment" in runs and runs["experiment"].notna().any():
        return str(runs["experiment"].dropna().iloc[0])
    return root.resolve().name


def _summary_table(root: Path) -> pd.DataFrame | None:
    try:
        if (root / "summary.parquet").is_file():
            return pd.read_parquet(root / "summary.parquet")
        if (root / "summary.csv").is_file():
            return pd.read_csv(root / "summary.csv")
    except (OSError, ValueError) as e:
        raise ConfigError(str(root / "summary.parquet"), None, f"unreadable: {e}") from e
    return None


def _whole_csv_rows(path: Path, table: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """`table` without the last row when `path` does not end in a newline: a file cut short
    (copied while written) ends in a row whose missing cells would be read as values."""
    with path.open("rb") as f:
        f.seek(0, 2)
        if f.tell() == 0:
            return table, None
        f.seek(-1, 2)
        whole = f.read(1) == b"\n"
    if whole or table.empty:
        return table, None
    return table.iloc[:-1], f"{path.name}: its last row is cut short (no newline); left out"


def _matrix_from_summary(runs: pd.DataFrame) -> list[str]:
    # The point column holds `k=v,...`; its keys are the matrix parameters, in order.
    if "point" not in runs or runs.empty:
        return []
    return [k for k in parse_point_name(str(runs["point"].iloc[0])) if k in runs.columns]


def load_calls(run_dir: str | Path) -> pd.DataFrame:
    """A run's per-call table: `calls.parquet`, else `calls.jsonl` (a torn last line is skipped)."""
    run_dir = Path(run_dir)
    parquet = run_dir / "calls.parquet"
    if parquet.is_file():
        try:
            return pd.read_parquet(parquet)
        except (OSError, ValueError):
            pass  # written while the run died; the streamed jsonl still has every finished call
    rows = []
    jsonl = run_dir / "calls.jsonl"
    if jsonl.is_file():
        for line in jsonl.read_bytes().splitlines():
            try:
                rows.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                continue
    return pd.DataFrame(rows)
