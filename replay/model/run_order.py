"""The edge of the model: a recorded run's call times, read from its calls.parquet or calls.jsonl.

`predict_tiers(..., order=read_run_schedule(DIR))` replays what the engine actually saw: each
call's lookup at `t_send`, the end of its prefill at `t_first_token` (`t_end` when the engine did
not stream) and its end at `t_end`. `read_run_order` gives the bare send order (sorted by `t_send`,
ties by `t_ready`, then by row). This is the one module of `replay.model` that reads files; the
core receives call refs or a Schedule.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson

from replay.errors import ConfigError
from replay.model.order import Schedule
from replay.status import CallStatus
from replay.trace.model import CallRef

__all__ = ["read_run_order", "read_run_schedule", "parse_order"]

_COLUMNS = ["task", "call", "t_ready", "t_send", "t_first_token", "t_end", "status"]


def _rows_parquet(path: Path) -> list[dict]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path, columns=_COLUMNS)
    except Exception as e:  # pyarrow raises several unrelated types for a bad file
        raise ConfigError(str(path), "calls.parquet", f"cannot read: {e}") from None
    return table.to_pylist()


def _rows_jsonl(path: Path) -> list[dict]:
    rows = []
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                if not line.endswith(b"\n"):  # a last line cut off by a crash
                    break
                raise ConfigError(f"{path}:{n}", None, "not a JSON object") from None
    return rows


def _read_rows(run_dir: str | Path) -> tuple[Path, list[dict]]:
    d = Path(run_dir)
    if (d / "calls.parquet").is_file():
        return d / "calls.parquet", _rows_parquet(d / "calls.parquet")
    if (d / "calls.jsonl").is_file():
        return d / "calls.jsonl", _rows_jsonl(d / "calls.jsonl")
    raise ConfigError(str(d), "order", "no calls.parquet or calls.jsonl here: give a run directory")


def _sent_rows(run_dir: str | Path, include_errors: bool) -> list[tuple]:
    """(t_send, t_ready, row number, ref, row) of the sent calls, in send order."""
    path, rows = _read_rows(run_dir)
    keyed = []
    for n, r in enumerate(rows):
        try:
            ref = (str(r["task"]), int(r["call"]))
            t_send = r.get("t_send")
        except (KeyError, TypeError, ValueError):
            raise ConfigError(str(path), "task/call", f"row {n + 1} lacks task or call") from None
        if t_send is None or (
            not include_errors and r.get("status", CallStatus.OK) != CallStatus.OK
        ):
            continue
        t_ready = r.get("t_ready")
        keyed.append((float(t_send), float(t_ready if t_ready is not None else t_send), n, ref, r))
    keyed.sort(key=lambda x: x[:3])
    return keyed


def read_run_order(run_dir: str | Path, *, include_errors: bool = False) -> list[CallRef]:
    """Call refs of a run directory in the order they were sent.

    Calls never sent are left out, and so are calls that failed (an engine that rejects a request
    never looks it up), unless `include_errors`.
    """
    return [x[3] for x in _sent_rows(run_dir, include_errors)]


def read_run_schedule(run_dir: str | Path, *, include_errors: bool = False) -> Schedule:
    """The recorded run's lookup, prefill-end and end time of every sent call (see module doc)."""
    rows = _sent_rows(run_dir, include_errors)
    t = np.empty((len(rows), 3), np.float64)
    for i, (t_send, _, _, _, r) in enumerate(rows):
        t_end = r.get("t_end")
        t_end = t_send if t_end is None else max(float(t_end), t_send)
        t_first = r.get("t_first_token")
        t_first = t_end if t_first is None else min(max(float(t_first), t_send), t_end)
        t[i] = (t_send, t_first, t_end)
    return Schedule([x[3] for x in rows], t[:, 0], t[:, 1], t[:, 2])


def parse_order(spec: str) -> str | Schedule:
    """`trace`, `pool` or `run:DIR` from the command line; `run:DIR` is read here, at the edge."""
    if spec.startswith("run:"):
        return read_run_schedule(spec[4:])
    return spec
