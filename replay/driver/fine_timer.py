"""An event loop whose timers fire within microseconds of their deadline, not up to 1 ms late.

asyncio sleeps in its selector until the next timer is due, and `epoll_wait` takes whole
milliseconds: `selectors.EpollSelector` rounds the wait up (and, for about one wait in nine,
Python's float-to-ms conversion adds another ms), so on an idle loop a timer fires 0-2 ms after
its deadline (p50 ~0.9 ms measured). `FineEpollSelector` waits in `select(2)` on the epoll fd
itself, whose timeout is in microseconds, then collects the events with a zero-timeout `epoll`:
the epoll fd is readable as soon as any registered fd has an event, so I/O still ends the wait
at once; a turn that waits costs one more system call (~1 us). The loop thread's timer slack (the
kernel's licence to wake it late, 50 us by default) is lowered too, so the finer wait is not given
back to slack.

Even so, a thread that slept is woken late by the machine: on the 2-core VM these numbers come
from, 500 waits of 3.5 ms on this selector alone ended 0.184 ms late at the median and 0.329 ms
at p99, the time the hypervisor takes to run an idle vCPU again. So the selector sleeps only
until `spin_s` before the deadline and polls the epoll fd, without sleeping, for the rest (each
poll is one zero-timeout `epoll_wait`, which still reports I/O at once): with 0.5 ms of spin the
same waits ended 0.005 ms late at the median and 0.060 ms at p99 (docs/driver.md). The price
is CPU: at most `spin_s` a wait whose deadline is nearer than the next event, so up to
`rate x spin_s` of a core at `rate` timer deadlines a second (about 15% at the Mooncake slice's
290 calls a second); `spin_s=0` turns it off.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import select
import selectors
import sys
import time

__all__ = ["FineEpollSelector", "new_loop", "fine_timer_available", "spun_s"]

# `select(2)` takes only fds below FD_SETSIZE; the epoll fd is made when the loop is, before the
# run opens its connections, so it is low in practice; if not, the loop waits as plain asyncio
_FD_SETSIZE = 1024
_PR_SET_TIMERSLACK = 29  # linux/prctl.h
_TIMER_SLACK_NS = 1_000
# covers this VM's p99 wake-up lateness (0.329 ms, measured as the module docstring says)
SPIN_S = 0.0005


def fine_timer_available() -> bool:
    return hasattr(selectors, "EpollSelector")


class FineEpollSelector(selectors.EpollSelector):  # type: ignore[misc,name-defined]
    """`EpollSelector` whose `select(timeout)` waits `timeout` to the microsecond: it sleeps
    until `spin_s` before the end and polls for the rest."""

    def __init__(self, spin_s: float = SPIN_S) -> None:
        if not spin_s >= 0:
            raise ValueError(f"spin_s must be >= 0, got {spin_s!r}")
        super().__init__()
        fd = self.fileno()
        self._fine = fd < _FD_SETSIZE
        self._rfds = [fd]
        self.spin_s = spin_s
        # seconds spent polling: CPU the process used only to be on time, which a diagnosis of
        # client CPU saturation must not count (replay/driver/run.py)
        self.spun_s = 0.0

    def select(self, timeout: float | None = None) -> list:
        if timeout is None or timeout <= 0 or not self._fine:
            return super().select(timeout)
        # asyncio computed `timeout` from its clock, which is time.monotonic
        end = time.monotonic() + timeout
        sleep_s = timeout - self.spin_s
        # the epoll fd turns readable when a registered fd has an event (level-triggered, so
        # the poll below still reports it); Python retries the wait after a signal, and
        # asyncio's signal wake-up fd is registered, so a signal ends it too
        if sleep_s > 0 and select.select(self._rfds, (), (), sleep_s)[0]:
            return super().select(0)
        t0 = now = time.monotonic()
        while True:
            ready = super().select(0)
            if ready or now >= end:
                self.spun_s += now - t0
                return ready
            now = time.monotonic()


def _lower_timer_slack() -> None:
    """Ask the kernel to wake this thread within ~1 us of its timers (Linux; else nothing)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError, TypeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_TIMERSLACK, _TIMER_SLACK_NS, 0, 0, 0)


def new_loop(spin_s: float = SPIN_S) -> asyncio.AbstractEventLoop:
    """A fresh asyncio loop on `FineEpollSelector` (a plain one where epoll is missing), for the
    thread that calls this: its timer slack is lowered as well. What `replay run` uses."""
    if not fine_timer_available():
        return asyncio.new_event_loop()
    _lower_timer_slack()
    return asyncio.SelectorEventLoop(FineEpollSelector(spin_s))


def spun_s(loop: asyncio.AbstractEventLoop) -> float:
    """Seconds `loop`'s selector spent polling before deadlines (0 for any other loop)."""
    return float(getattr(getattr(loop, "_selector", None), "spun_s", 0.0))
