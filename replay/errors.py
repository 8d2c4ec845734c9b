"""The project's own exception types: library errors are translated into these at the edges."""

from __future__ import annotations

__all__ = [
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


class RequestFailed(ReplayError):
    """One completion request failed. `kind` is a stable class name used in records and summaries.

    Kinds: http_4xx, http_5xx, timeout, connection, malformed, length_mismatch, cancelled.
    """

    exit_code = 1

    def __init__(self, kind: str, message: str, status: int | None = None):
        self.kind = kind
        self.status = status
        super().__init__(f"{kind}: {message}")


class ServerGone(ReplayError):
    """The server refused connections for longer than the grace period: the run cannot go on."""

    exit_code = 1
