"""Which files the code under test opens, seen through the interpreter's audit hook: how a test
shows that a large input is read from disk once, not twice."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

_opened: list[str] | None = None
_installed = False


def _hook(event: str, args: tuple) -> None:
    if _opened is not None and event == "open" and isinstance(args[0], str | Path):
        _opened.append(str(args[0]))


@contextlib.contextmanager
def opened_files() -> Iterator[list[str]]:
    """The paths opened inside the block, in order (the list fills while the block runs)."""
    global _opened, _installed
    if not _installed:
        sys.addaudithook(_hook)  # cannot be removed: it records only inside this block
        _installed = True
    _opened = seen = []
    try:
        yield seen
    finally:
        _opened = None
