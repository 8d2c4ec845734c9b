"""Importers: recorded traces from other tools into a validated v1 `Trace`.

One function per source layout, registered explicitly in `IMPORTERS`; each takes a list of
source paths (files or directories) and an optional target `vocab_size`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from replay.errors import ConfigError
from replay.trace.importers.efficientagent import import_efficientagent
from replay.trace.importers.mooncake import import_mooncake
from replay.trace.importers.tokenlog import import_tokenlog
from replay.trace.importers.weka import import_weka
from replay.trace.io import check_graph
from replay.trace.model import Trace

__all__ = [
    "IMPORTERS",
    "import_trace",
    "import_weka",
    "import_mooncake",
    "import_efficientagent",
    "import_tokenlog",
]

Importer = Callable[..., Trace]

IMPORTERS: dict[str, Importer] = {
    "efficientagent": import_efficientagent,
    "weka": import_weka,
    "mooncake": import_mooncake,
    "tokenlog": import_tokenlog,
}


def import_trace(
    kind: str, sources: Sequence[str | os.PathLike], vocab_size: int | None = None
) -> Trace:
    """Import `sources` with the importer `kind`; the result passes the reader's graph checks."""
    try:
        fn = IMPORTERS[kind]
    except KeyError:
        raise ConfigError(
            "trace import",
            "--from",
            f"unknown kind {kind!r}; valid: {', '.join(sorted(IMPORTERS))}",
        ) from None
    if not sources:
        raise ConfigError("trace import", "SRC", "give at least one source path")
    trace = fn(list(sources), vocab_size=vocab_size)
    check_graph(trace.calls, f"<{kind} import>")
    return trace
