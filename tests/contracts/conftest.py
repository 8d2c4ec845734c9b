"""Fixtures of the engine contract tier (`make test-contracts`, marker `contracts`): the released
sources of the engines each adapter is pinned to, read without importing the engines.

The release checked defaults to the adapter's PINNED_VERSION; REPLAY_CONTRACT_VLLM,
REPLAY_CONTRACT_SGLANG and REPLAY_CONTRACT_LMCACHE check another (a new release before re-pinning).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from replay.engines import lmcache, sglang, vllm
from tests.contracts.release import release_root


@dataclass(frozen=True)
class Release:
    package: str
    engine: str  # the name used in messages
    version: str  # the release checked
    pinned: str  # the release the adapter was last checked against
    root: Path

    def versions(self, checked: str | None = None) -> dict[str, str]:
        """The `engine`, `checked` and `pinned` keywords of the `check_*` functions; `checked`
        stands for another release (a test that doctors the definitions as a later one would)."""
        return {"engine": self.engine, "checked": checked or self.version, "pinned": self.pinned}


def _release(package: str, engine: str, pinned: str) -> Release:
    version = os.environ.get(f"REPLAY_CONTRACT_{package.upper()}", pinned)
    return Release(package, engine, version, pinned, release_root(package, version))


@pytest.fixture(scope="session")
def vllm_release() -> Release:
    return _release("vllm", "vLLM", vllm.PINNED_VERSION)


@pytest.fixture(scope="session")
def sglang_release() -> Release:
    return _release("sglang", "SGLang", sglang.PINNED_VERSION)


@pytest.fixture(scope="session")
def lmcache_release() -> Release:
    return _release("lmcache", "LMCache", lmcache.PINNED_VERSION)
