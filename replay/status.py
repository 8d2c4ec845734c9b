"""Statuses written to results files: of one call (calls.jsonl/parquet) and of one run (run.json).

StrEnums, so each value is the string the files have always held and compares equal to it: results
written before these types existed read back unchanged.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["CallStatus", "RunStatus"]


class CallStatus(StrEnum):
    """`status` of a call record; a failed call's reason is in `error_kind` and `error`."""

    OK = "ok"
    ERROR = "error"


class RunStatus(StrEnum):
    """`status` of run.json. `ok` and `errors` (some calls failed, the run went on) are finished
    runs; `failed` stopped early (server gone, --strict, launch failure); `interrupted` was
    stopped by a signal."""

    OK = "ok"
    ERRORS = "errors"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
