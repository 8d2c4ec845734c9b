"""What a replay reports and how its owner steers it: the live counts (`PoolStats`), the result
(`RunResult`) and the handle that stops a run from outside (`RunControl`). The pool that fills and
obeys them is `replay.driver.pool`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from replay.status import RunStatus

if TYPE_CHECKING:
    from replay.driver.pool import _Pool

__all__ = ["PoolStats", "RunResult", "RunControl"]


@dataclass
class PoolStats:
    """Live counts, read by the progress bar."""

    total: int
    done: int = 0
    inflight: int = 0
    errors: int = 0


@dataclass
class RunResult:
    """What a replay produced. `rows` are the call records (also streamed to the sink)."""

    status: RunStatus
    reason: str | None
    rows: list[dict[str, Any]]
    total_calls: int
    skipped_calls: int
    connection_retries: int
    loop_lag_s: list[float] = field(default_factory=list)
    open_loop: bool = False


class RunControl:
    """Lets the owner of the run stop it from outside (signal handlers): no new sends after."""

    def __init__(self) -> None:
        self._pool: _Pool | None = None
        self._pending: tuple[RunStatus, str] | None = None

    def stop(self, status: RunStatus = RunStatus.INTERRUPTED, reason: str = "interrupted") -> None:
        if self._pool is not None:
            self._pool.stop(status, reason)
        else:
            self._pending = (status, reason)

    def hurry(self) -> None:
        """After `stop`: cancel the calls still in flight now instead of after their grace."""
        if self._pool is not None:
            self._pool.hurry()
