"""An event loop whose timers fire within microseconds of their deadline, not up to 1 ms late.

asyncio sleeps in its selector until the next timer is due, and `epoll_wait` takes whole
milliseconds: `selectors.EpollSelector` rounds the wait up (and, for about one wait in nine,
Python's float-to-ms conversion adds another ms), so on an idle loop a timer fires 0-2 ms after
its deadline (p50 ~0.9 ms measured). `FineEpollSelector` waits in `select(2)` on the epoll fd
itself, whose timeout is in microseconds, then collects the events with a zero-timeout `epoll`:
the epoll fd is readable as soon as any registered fd has an event, so I/O still ends the wait
at once. Nothing spins; a turn that waits costs one more system call (~1 us). The loop thread's timer slack (the kernel's licence to wake it late, 50 us by default) is
lowered too, so the finer wait is not given back to slack.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import select
import selectors
import sys

__all__ = ["FineEpollSelector", "new_loop", "fine_timer_available"]

# `select(2)` takes only fds below FD_SETSIZE; the epoll fd is made when the loop is, before the
# run opens its connections, so it is low in practice; if not, the loop waits as plain asyncio
_FD_SETSIZE = 1024
_PR_SET_TIMERSLACK = 29  # linux/prctl.h
_TIMER_SLACK_NS = 1_000


def fine_timer_available() -> bool:
    return hasattr(selectors, "EpollSelector")


class FineEpollSelector(selectors.EpollSelector):  # type: ignore[misc,name-defined]
    """`EpollSelector` whose `select(timeout)` waits `timeout` to the microsecond."""

    def __init__(self) -> None:
        super().__init__()
        fd = self.fileno()
        self._fine = fd < _FD_SETSIZE
        self._rfds = [fd]

    def select(self, timeout: float | None = None) -> list:
        if timeout is not None and timeout > 0 and self._fine:
            # the epoll fd turns readable when a registered fd has an event (level-triggered,
            # so the poll below still reports it); Python retries the wait after a signal, and
            # asyncio's signal wake-up fd is registered, so a signal ends it too
            select.select(self._rfds, (), (), timeout)
            timeout = 0
        return super().select(timeout)


def _lower_timer_slack() -> None:
    """Ask the kernel to wake this thread within ~1 us of its timers (Linux; else nothing)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError, TypeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_TIMERSLACK, _TIMER_SLACK_NS, 0, 0, 0)


def new_loop() -> asyncio.AbstractEventLoop:
    """A fresh asyncio loop on `FineEpollSelector` (a plain one where epoll is missing), for the
    thread that calls this: its timer slack is lowered as well. What `replay run` uses."""
    if not fine_timer_available():
        return asyncio.new_event_loop()
    _lower_timer_slack()
    return asyncio.SelectorEventLoop(FineEpollSelector())
