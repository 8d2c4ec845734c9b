"""Closed-loop driver: a pool of agents replaying a trace through a transport.

Public names, imported lazily so that `replay.driver.transport` (the seam the simulator imports)
stays light: `RunOptions`, `replay`, `RunControl`, `RunResult`, `run_replay`,
`http_transport_factory`, `DEFAULT_TRANSPORT`.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "RunOptions",
    "replay",
    "RunControl",
    "RunResult",
    "run_replay",
    "http_transport_factory",
    "DEFAULT_TRANSPORT",
]

_WHERE = {
    "RunOptions": "replay.driver.options",
    "replay": "replay.driver.pool",
    "RunControl": "replay.driver.pool",
    "RunResult": "replay.driver.pool",
    "run_replay": "replay.driver.run",
    "http_transport_factory": "replay.driver.http",
    "DEFAULT_TRANSPORT": "replay.driver.http",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'replay.driver' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
