"""Test-suite hooks: the `shared` marker (tests that need data from ../shared)."""

from __future__ import annotations

import pytest

from tests.shared_data import require_shared


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "shared(*paths): needs ../shared/<path>; skipped when absent, failed under CI=true",
    )


@pytest.hookimpl(tryfirst=True)  # before fixtures that would read the missing data
def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("shared"):
        require_shared(*mark.args)
