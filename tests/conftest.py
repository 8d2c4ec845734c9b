"""Test-suite hooks: the `shared` marker (tests that need data from ../shared), and a private
parsed-trace cache so that the suite never writes into the user's ~/.cache."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest
from hypothesis import settings

from tests.shared_data import require_shared

# No per-example time limit: on a shared 2-core machine a 200 ms deadline fails correct code
settings.register_profile("replay", deadline=None)
settings.load_profile("replay")

_MADE_CACHE: str | None = None


def pytest_unconfigure(config: pytest.Config) -> None:
    if _MADE_CACHE is not None:
        shutil.rmtree(_MADE_CACHE, ignore_errors=True)


def pytest_configure(config: pytest.Config) -> None:
    global _MADE_CACHE
    if "REPLAY_TRACE_CACHE" not in os.environ:  # child processes inherit it
        _MADE_CACHE = tempfile.mkdtemp(prefix="replay-test-trace-cache-")
        os.environ["REPLAY_TRACE_CACHE"] = _MADE_CACHE
    config.addinivalue_line(
        "markers",
        "shared(*paths): needs ../shared/<path>; skipped when absent, failed under CI=true",
    )


@pytest.hookimpl(tryfirst=True)  # before fixtures that would read the missing data
def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("shared"):
        require_shared(*mark.args)
