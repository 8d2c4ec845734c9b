"""How the harness takes the signals that stop it: SIGTERM and SIGHUP as Ctrl-C, and none of them in
the middle of stopping a server and recording its run.

A sweep's `finally` blocks stop the server it launched. SIGTERM (a scheduler, `kill`) and SIGHUP
(a closed terminal, a dropped ssh session) would end the process without running them and leave
the server running, so while a sweep runs they raise KeyboardInterrupt as Ctrl-C does. While a
server is being stopped and its run recorded, a signal only cuts the stop's grace short (SIGKILL
now) and is raised once the run is recorded: a second Ctrl-C there left the server running and a
run.json without the sweep's keys. A signal the process ignores (`nohup`, `cmd &` from a script)
stays ignored. Main thread only; elsewhere these do nothing.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["sigterm_as_interrupt", "interrupts_deferred"]

_AS_INTERRUPT = (signal.SIGTERM, signal.SIGHUP)
_STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _install(signals: tuple[int, ...], handler: Callable[[int, Any], None]) -> dict[int, Any]:
    """Install `handler` for each signal not ignored; returns the previous handlers ({} off the
    main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {}
    for sig in signals:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            previous[sig] = signal.signal(sig, handler)
    return previous


def _restore(previous: dict[int, Any]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While active, SIGTERM and SIGHUP raise KeyboardInterrupt like Ctrl-C."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = _install(_AS_INTERRUPT, handler)
    try:
        yield
    finally:
        _restore(previous)


@contextlib.contextmanager
def interrupts_deferred(on_signal: Callable[[], None] | None = None) -> Iterator[None]:
    """While active, Ctrl-C, SIGTERM and SIGHUP interrupt nothing: each calls `on_signal` (to
    hurry what is running) and is remembered; on leaving, one remembered raises
    KeyboardInterrupt (unless an exception is already on its way out)."""
    came: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        came.append(signum)
        if on_signal is not None:
            on_signal()

    previous = _install(_STOPPING, handler)
    try:
        yield
    finally:
        _restore(previous)
    if came:
        raise KeyboardInterrupt
