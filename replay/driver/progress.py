"""Live progress bar (tqdm on stderr): calls done/total, in flight, errors, elapsed.

Refreshed from a timer twice a second rather than per call, so a 2,000 calls/s run pays nothing.
The bar is built before the run's clock starts: its first render is slow enough to show as drift.
"""

from __future__ import annotations

import asyncio
import sys
import threading

from tqdm import tqdm

__all__ = ["ProgressBar", "progress_wanted"]

_REFRESH_S = 0.5


def progress_wanted(json_output: bool) -> bool:
    """A bar only for a person watching: not with --json, not when stderr is not a terminal."""
    return not json_output and sys.stderr.isatty()


class ProgressBar:
    """Shows a `PoolStats` (total, done, inflight, errors) until `close()`."""

    def __init__(self, stats) -> None:
        self.stats = stats
        # tqdm's default lock is a multiprocessing one, which starts a helper process on first
        # use; a thread lock is all one bar on one loop needs
        tqdm.set_lock(threading.RLock())
        self.bar = tqdm(total=stats.total, unit="call", file=sys.stderr, dynamic_ncols=True)
        self._show()

    def _show(self) -> None:
        s = self.stats
        self.bar.n = s.done
        self.bar.set_postfix(inflight=s.inflight, errors=s.errors, refresh=False)
        self.bar.refresh()

    async def run(self) -> None:
        while True:
            await asyncio.sleep(_REFRESH_S)
            self._show()

    def close(self) -> None:
        self._show()
        self.bar.close()
