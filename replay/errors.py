"""The project's own exception types: library errors are translated into these at the edges."""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "ErrorKind",
    "ReplayError",
    "TraceError",
    "ConfigError",
    "EngineError",
    "RequestFailed",
    "ServerGone",
]


class ReplayError(Exception):
    """Base of every error `replay` raises on purpose; the CLI prints these without a traceback."""

    exit_code = 2


class TraceError(ReplayError):
    """A trace file is malformed. Carries where (file, line, field) and why, for `FILE:LINE: field: why`."""

    def __init__(self, file: str, line: int | None, field: str | None, why: str):
        self.file = str(file)
        self.line = line
        self.field = field
        self.why = why
        super().__init__(self.format())

    def format(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.field or '-'}: {self.why}"


class ConfigError(ReplayError):
    """An experiment file, preset name or command-line option is invalid; the message names the field."""

    def __init__(self, where: str, field: str | None, why: str):
        self.where = where
        self.field = field
        self.why = why
        super().__init__(f"{where}: {field or '-'}: {why}")


class EngineError(ReplayError):
    """A serving engine could not be launched, did not become healthy, or misbehaved at the control plane."""

    exit_code = 1


class ErrorKind(StrEnum):
    """Why a call failed: the `error_kind` column of calls.jsonl/parquet and the keys of the
    summary's `error_kinds`. The values are stable: results files carry them."""

    HTTP_4XX = "http_4xx"  # the server refused the request (bad or too long for it)
    HTTP_5XX = "http_5xx"  # the server failed while serving it
    TIMEOUT = "timeout"  # no complete response within the request timeout
    CONNECTION = "connection"  # refused, reset or closed before the response was complete
    MALFORMED = "malformed"  # a response the client could not read as a completion
    LENGTH_MISMATCH = "length_mismatch"  # --strict: reported lengths differ from what was sent
    CANCELLED = "cancelled"  # the run stopped while the call was in flight

    @classmethod
    def of_http_status(cls, status: int) -> ErrorKind:
        """The kind an HTTP error status gives: 4xx the request, anything else the server."""
        return cls.HTTP_4XX if 400 <= status < 500 else cls.HTTP_5XX


class RequestFailed(ReplayError):
    """One completion request failed. `kind` is a stable class name used in records and summaries.

    `kind` is an `ErrorKind` (its string value is accepted too; an unknown one is a ValueError,
    so a misspelt kind fails where it is raised, not as a new column value in the results).
    """

    exit_code = 1

    def __init__(self, kind: ErrorKind | str, message: str, status: int | None = None):
        self.kind = ErrorKind(kind)
        self.status = status
        super().__init__(f"{kind}: {message}")


class ServerGone(ReplayError):
    """The server refused connections for longer than the grace period: the run cannot go on."""

    exit_code = 1
