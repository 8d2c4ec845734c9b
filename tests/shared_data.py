"""Test data kept beside the repository, in ../shared (real traces too large to commit).

A test that needs it is marked `@pytest.mark.shared("traces/weka")` (or calls `require_shared`
in a fixture). Missing data skips the test on a developer's machine, but fails it under
`CI=true`: a CI run that silently skipped them would pass without having run them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

__all__ = ["SHARED", "in_ci", "require_shared"]

SHARED = Path(__file__).resolve().parents[2] / "shared"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def require_shared(*relative: str) -> None:
    """Skip the calling test (fail it under CI=true) unless every ../shared/<path> exists."""
    missing = [r for r in relative if not (SHARED / r).exists()]
    if not missing:
        return
    what = f"../shared/{missing[0]} not present (looked in {SHARED})"
    if in_ci():
        pytest.fail(f"{what}; CI=true runs every test that needs the shared data", pytrace=False)
    pytest.skip(what)
