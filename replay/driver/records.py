"""Call records: streamed to calls.jsonl as calls finish, converted to calls.parquet, summarized.

Columns and summary keys are the contract of docs/results.md. The summary functions are pure (rows
in, numbers out) so analysis code can recompute them from calls.parquet.
"""

from __future__ import annotations

import os
import tempfile
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import IO, Annotated, Any, NamedTuple

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from replay.counters import (
    CANONICAL_COUNTERS,
    COMPUTED_PREFILL_TOKENS,
    DEVICE_HIT_TOKENS,
    HOST_RESTORE_TOKENS,
)
from replay.driver.arrow_columns import rows_table
from replay.driver.latency import latency_summary
from replay.errors import ErrorKind
from replay.status import CallStatus

__all__ = [
    "CallRecord",
    "arrow_schema",
    "CALL_SCHEMA",
    "CALL_COLUMNS",
    "JsonlSink",
    "read_jsonl",
    "write_parquet",
    "summarize",
    "study_makespan_s",
    "percentile",
    "write_json_atomic",
    "chmod_by_umask",
    "length_warnings",
    "stream_columns",
]

Int32 = Annotated[int, pa.int32()]  # a column stored as int32 (plain `int` is int64)


class CallRecord(NamedTuple):
    """One finished call: a row of calls.jsonl and calls.parquet (docs/results.md).

    The one source of the column names and types: `CALL_SCHEMA` is generated from these fields, so
    a field spelt differently here and where a record is built fails at construction instead of
    leaving an all-null column. Times are seconds from the run's start; token counts are tokens.
    A NamedTuple rather than a frozen dataclass: as immutable, and built in a third of the time
    on the driver's per-call path (a frozen dataclass sets each of 19 fields through
    object.__setattr__).
    """

    task: str
    call: Int32
    slot: Int32  # pool slot that sent it (sub-agents: their root's slot)
    t_ready: float  # when every dependency had ended and the recorded gap had passed
    t_send: float
    t_first_token: float | None  # None when the response was not streamed or the call failed
    t_end: float
    drift_s: float  # t_send - t_ready: how late the client sent it
    prompt_tokens: int  # as sent
    prompt_tokens_reported: int | None  # as the server reported them (None: not reported)
    max_tokens: int  # the recorded output length, forced
    completion_tokens: int | None
    cached_tokens: int | None  # usage.prompt_tokens_details.cached_tokens
    device_hit_tokens: int | None
    host_restore_tokens: int | None
    exact_match: float | None  # share of forced output ids returned exactly
    status: CallStatus
    error_kind: ErrorKind | None
    error: str | None
    # token-level stream times (added later: older calls files lack them, and read them as null)
    t_second_token: float | None = None
    t_last_token: float | None = None
    stream_tokens: int | None = None

    def as_row(self) -> dict[str, Any]:
        """The row as written to calls.jsonl: plain JSON values, keys in column order."""
        row = dict(zip(CALL_COLUMNS, self))  # noqa: B905 - a CallRecord has every column
        # `_value_`, not `.value`: the property costs ~0.4 us on Python 3.11, once per call
        row["status"] = self.status._value_
        if self.error_kind is not None:
            row["error_kind"] = self.error_kind._value_
        return row


_ARROW_TYPES = {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}


def arrow_schema(record_type: type[tuple]) -> pa.Schema:
    """A pyarrow schema with one nullable column per field of a NamedTuple, in field order.

    `X | None` is X's type; a str enum is a string; `Annotated[int, pa.int32()]` takes the arrow
    type given. Any other annotation is a TypeError naming the field, so no column is guessed.
    """
    hints = typing.get_type_hints(record_type, include_extras=True)
    columns = []
    for name in record_type._fields:  # type: ignore[attr-defined]
        hint = hints[name]
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if isinstance(hint, types.UnionType) and len(args) == 1:
            hint = args[0]
        if typing.get_origin(hint) is Annotated:
            arrow = next(m for m in hint.__metadata__ if isinstance(m, pa.DataType))
        elif isinstance(hint, type) and issubclass(hint, StrEnum):
            arrow = pa.string()
        elif hint in _ARROW_TYPES:
            arrow = _ARROW_TYPES[hint]
        else:
            raise TypeError(f"{record_type.__name__}.{name}: no arrow type for {hint!r}")
        columns.append((name, arrow))
    return pa.schema(columns)


CALL_SCHEMA = arrow_schema(CallRecord)
CALL_COLUMNS = tuple(CALL_SCHEMA.names)
_COLUMN_SET = frozenset(CALL_COLUMNS)


def stream_columns(res: Any, t0: float) -> dict[str, Any]:
    """A call's token-level stream columns from its `CompletionResult` (times since `t0`)."""
    return {
        "t_second_token": None if res.t_second_token is None else res.t_second_token - t0,
        "t_last_token": None if res.t_last_token is None else res.t_last_token - t0,
        "stream_tokens": res.stream_tokens,
    }


class JsonlSink:
    """Appends one JSON line per finished call and flushes it, so a crash loses nothing finished."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._f: IO[bytes] | None = open(self.path, "ab")  # noqa: SIM115 - closed by close()
        self.rows = 0

    def __call__(self, row: Mapping[str, Any]) -> None:
        if self._f is None:
            return
        self._f.write(orjson.dumps(row) + b"\n")
        self._f.flush()
        self.rows += 1

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Rows of a calls.jsonl; a last line cut off by a crash is ignored."""
    rows = []
    with open(path, "rb") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                rows.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                break
    return rows


def _umask() -> int:
    """The process umask. Linux shows it in /proc (reading it there changes nothing); elsewhere
    it can only be read by setting it, which is safe here as no other thread creates files yet."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def chmod_by_umask(fd: int) -> None:
    """Give a mkstemp file (always 0600) the mode open() would have: 0666 less the umask, so
    results are as readable as any other file the user writes."""
    os.fchmod(fd, 0o666 & ~_umask())


def write_parquet(rows: Iterable[Mapping[str, Any]], path: str | os.PathLike) -> None:
    """calls.parquet with the fixed schema (an empty run still gets a file with the columns).

    A key that is not a column is a ValueError (a misspelt field must not vanish); a missing one
    is null, as in rows written before that column existed."""
    rows = list(rows)
    for r in rows:
        unknown = r.keys() - _COLUMN_SET
        if unknown:
            raise ValueError(f"call row has keys that are not columns: {sorted(unknown)}")
    table = rows_table(rows, CALL_SCHEMA)
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".parquet.tmp")
    chmod_by_umask(fd)
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".json.tmp")
    chmod_by_umask(fd)
    with os.fdopen(fd, "wb") as f:
        f.write(orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    os.replace(tmp, path)


def percentile(values: Iterable[float], q: float) -> float | None:
    """q-th percentile (linear interpolation), None for no values."""
    arr = np.fromiter(values, dtype=np.float64)
    return float(np.percentile(arr, q)) if arr.size else None


def _sum_known(rows: list[Mapping[str, Any]], key: str) -> int | None:
    """Sum of a per-call count, or None when no call reported it (unknown is not zero)."""
    vals = [r[key] for r in rows if r.get(key) is not None]
    return int(sum(vals)) if vals else None


def study_makespan_s(rows: Iterable[Mapping[str, Any]], tail_gaps_s: Mapping[str, float]) -> float:
    """The EfficientAgent study's makespan: from the run's start (time 0, when the first slots
    begin their first call's gap) to the end of the last task's tail gap, that is
    max over tasks of (the task's last t_end + its tail gap, scaled as replayed); 0 for no calls.

    The release's client (efficientagent/replay/client.py `run`) starts its clock before its
    workers sleep the first gap, and each worker sleeps a task's `tail_gap_s` after its last call,
    also after the run's last task, before the clock stops. Our `makespan_s` runs from the first
    send to the last response, so it leaves out the first gap and the last tail gap."""
    last: dict[str, float] = {}
    for r in rows:
        t = r["task"]
        last[t] = max(last.get(t, r["t_end"]), r["t_end"])
    return max((end + tail_gaps_s.get(t, 0.0) for t, end in last.items()), default=0.0)


def summarize(
    rows: Sequence[Mapping[str, Any]],
    *,
    counters: Mapping[str, Any] | None = None,
    loop_lag_s: Iterable[float] = (),
    slo_s: Mapping[str, float] | None = None,
    tail_gaps_s: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The run summary of docs/results.md.

    makespan_s = max(t_end) - min(t_send) over calls; with `tail_gaps_s` (each task's tail gap
    as replayed), also `study_makespan_s` (the EfficientAgent study's definition, see
    `study_makespan_s`); TTFT = t_first_token - t_send (ok calls);
    task JCT = last t_end - first t_send of the task; drift = t_send - t_ready (every call but those
    that failed with `connection`).
    Server-side `counters` (canonical names) override the per-call sums where they are known.
    Token-level latencies, their p1..p99 table and goodput under `slo_s`: replay.driver.latency.
    """
    ok = [r for r in rows if r["status"] == CallStatus.OK]
    errors = len(rows) - len(ok)
    makespan = max((r["t_end"] for r in rows), default=0.0) - min(
        (r["t_send"] for r in rows), default=0.0
    )
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    for r in rows:
        t = r["task"]
        first[t] = min(first.get(t, r["t_send"]), r["t_send"])
        last[t] = max(last.get(t, r["t_end"]), r["t_end"])
    jct = [last[t] - first[t] for t in first]
    ttft = [r["t_first_token"] - r["t_send"] for r in ok if r.get("t_first_token") is not None]
    prompt_tokens = sum(r["prompt_tokens"] for r in ok)
    output_tokens = sum(
        r["completion_tokens"] if r.get("completion_tokens") is not None else r["max_tokens"]
        for r in ok
    )
    out: dict[str, Any] = {"makespan_s": makespan}
    if tail_gaps_s is not None:
        out["study_makespan_s"] = study_makespan_s(rows, tail_gaps_s)
    out |= {
        "calls": len(rows),
        "errors": errors,
        "prompt_tokens": prompt_tokens,
        "output_tokens": output_tokens,
        "cached_tokens": _sum_known(ok, "cached_tokens"),
    }
    for name in CANONICAL_COUNTERS:
        if name not in out:
            out[name] = None
    out[DEVICE_HIT_TOKENS] = _sum_known(ok, DEVICE_HIT_TOKENS)
    out[HOST_RESTORE_TOKENS] = _sum_known(ok, HOST_RESTORE_TOKENS)
    if out[DEVICE_HIT_TOKENS] is not None and out[HOST_RESTORE_TOKENS] is not None:
        out[COMPUTED_PREFILL_TOKENS] = (
            prompt_tokens - out[DEVICE_HIT_TOKENS] - out[HOST_RESTORE_TOKENS]
        )
    for name, value in (counters or {}).items():
        if name in ("prompt_tokens", "output_tokens"):
            continue  # what the client sent and received stays the client's count
        if value is not None or name not in out:
            out[name] = value
    exact = [r["exact_match"] for r in ok if r.get("exact_match") is not None]
    # a refused call's t_send is its last retry, when the run gave up on the server: a measure
    # of the outage, not of the client's timing (a reset one, also `connection`, goes with it)
    drift = [r["drift_s"] for r in rows if r.get("error_kind") != ErrorKind.CONNECTION]
    kinds: dict[str, int] = {}
    for r in rows:
        if r["status"] != CallStatus.OK:
            kinds[r["error_kind"]] = kinds.get(r["error_kind"], 0) + 1
    out.update(
        {
            "ttft_p50_s": percentile(ttft, 50),
            "ttft_p90_s": percentile(ttft, 90),
            "ttft_p99_s": percentile(ttft, 99),
            "jct_p50_s": percentile(jct, 50),
            "jct_p90_s": percentile(jct, 90),
            "prompt_mismatches": sum(
                1
                for r in rows
                if r.get("prompt_tokens_reported") is not None
                and r["prompt_tokens_reported"] != r["prompt_tokens"]
            ),
            "completion_mismatches": sum(
                1
                for r in rows
                if r.get("completion_tokens") is not None
                and r["completion_tokens"] != r["max_tokens"]
            ),
            # answered calls whose server sent no usage: their lengths are unchecked, not
            # matched (under --strict such a call is a length_mismatch error, and still one)
            "usage_missing": sum(
                1
                for r in rows
                if (
                    r["status"] == CallStatus.OK or r.get("error_kind") == ErrorKind.LENGTH_MISMATCH
                )
                and (r.get("prompt_tokens_reported") is None or r.get("completion_tokens") is None)
            ),
            "exact_match_rate": float(np.mean(exact)) if exact else None,
            "drift_p50_s": percentile(drift, 50),
            "drift_p99_s": percentile(drift, 99),
            "drift_max_s": max(drift) if drift else None,
            "loop_lag_p99_s": percentile(loop_lag_s, 99),
            "error_kinds": kinds,
            "output_tokens_per_s": output_tokens / makespan if makespan > 0 else None,
        }
    )
    out.update(latency_summary(ok, len(rows), makespan, slo_s))
    return out


def length_warnings(rows: Sequence[Mapping[str, Any]], summary: Mapping[str, Any]) -> list[str]:
    """One line per kind of unchecked or wrong length in a finished run (empty when all matched).

    A server that counts the prompt differently (another tokenizer, a template around the ids)
    or that sends no usage did not provably see what the trace says; the numbers of such a run
    are suspect, so it is said in run.json and on stderr rather than left to a column."""
    n = summary["calls"]
    out = []
    for key, reported, sent, what in (
        ("prompt_mismatches", "prompt_tokens_reported", "prompt_tokens", "prompt tokens than sent"),
        ("completion_mismatches", "completion_tokens", "max_tokens",
         "completion tokens than asked for"),
    ):  # fmt: skip
        bad = [r for r in rows if r.get(reported) is not None and r[reported] != r[sent]]
        if bad:
            r = bad[0]
            out.append(
                f"{summary[key]} of {n} calls: the server reported other {what} "
                f"(first: {r['task']} call {r['call']}: {'sent' if 'prompt' in key else 'asked'} "
                f"{r[sent]}, reported {r[reported]}); "
                "--strict fails the run on this"
            )
    if summary.get("usage_missing"):
        out.append(
            f"{summary['usage_missing']} of {n} calls: the server sent no usage, so their "
            "prompt and output lengths are unchecked; --strict fails the run on this"
        )
    over = [
        r
        for r in rows
        if r.get("cached_tokens") is not None and r["cached_tokens"] > r["prompt_tokens"]
    ]
    if over:  # a hit rate above 100%: the cache counts of the run are not to be trusted
        r = over[0]
        out.append(
            f"{len(over)} of {n} calls: the server reported more cached tokens than the prompt "
            f"has (first: {r['task']} call {r['call']}: prompt {r['prompt_tokens']}, cached "
            f"{r['cached_tokens']}), so the run's hit counts are wrong"
        )
    return out
