"""Where a run came from: engine version, GPU name, host, git revision, package versions.

Everything here is best effort with short timeouts: a missing `nvidia-smi` or `git` gives None,
never an error, because provenance must not stop a run.
"""

from __future__ import annotations

import importlib.metadata
import platform
import shutil
import subprocess
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from replay.engines.base import EngineAdapter

__all__ = [
    "utc_now_iso",
    "gpu_names",
    "git_revision",
    "package_versions",
    "engine_version",
    "server_version",
    "collect",
]

PACKAGES = ("replay", "numpy", "pandas", "pyarrow", "httpx", "aiohttp", "prometheus-client")


def utc_now_iso() -> str:
    """Now, ISO 8601 in UTC with seconds (e.g. 2026-12-02T15:40:00Z)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _run(argv: list[str], timeout_s: float, cwd: str | None = None) -> str | None:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout_s, cwd=cwd, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def gpu_names(timeout_s: float = 10.0) -> list[str] | None:
    """GPU names from `nvidia-smi` when it is on PATH; None on machines without it."""
    if shutil.which("nvidia-smi") is None:
        return None
    out = _run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], timeout_s)
    return [line.strip() for line in out.splitlines() if line.strip()] if out else None


def git_revision(path: str | Path = ".", timeout_s: float = 5.0) -> str | None:
    """`git rev-parse HEAD` of the checkout at `path` (with `-dirty` when it has changes)."""
    if shutil.which("git") is None:
        return None
    rev = _run(["git", "rev-parse", "HEAD"], timeout_s, cwd=str(path))
    if rev is None:
        return None
    dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"], timeout_s, cwd=str(path))
    return rev + ("-dirty" if dirty else "")


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Installed versions of the packages that shape a result."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def engine_version(
    adapter: EngineAdapter, options: Mapping[str, Any], timeout_s: float = 60.0
) -> str | None:
    """The engine's version from the adapter's probe command (None when it has none or fails)."""
    if adapter.version_argv is None:
        return None
    argv = adapter.version_argv(options)
    if not argv:
        return None
    key = tuple(argv)
    if key not in _VERSION_CACHE:  # importing an engine takes seconds: once per sweep process
        _VERSION_CACHE[key] = _run(argv, timeout_s)
    return _VERSION_CACHE[key]


_VERSION_CACHE: dict[tuple[str, ...], str | None] = {}

# Where OpenAI-compatible servers say what they are: vLLM and the simulator's server answer
# GET /version with {"version": ...}; SGLang's /get_server_info carries `version`; llama.cpp's
# /props carries `build_info`.
_VERSION_PATHS = (
    ("/version", "version"),
    ("/get_server_info", "version"),
    ("/props", "build_info"),
)


def server_version(root: str, timeout_s: float = 5.0) -> str | None:
    """A running server's own statement of its version, best effort (None when it makes none):
    the way to name an engine that was not launched here (an external server)."""
    import orjson

    from replay.metrics.plain_get import GetError, PlainGetter

    try:
        client = PlainGetter(root, timeout_s)
    except GetError:
        return None
    with client:
        for path, key in _VERSION_PATHS:
            try:
                status, body = client.get(root + path)
                if status // 100 != 2:
                    continue
                value = orjson.loads(body).get(key)
            except GetError as e:
                if e.timed_out:  # a silent server: the next paths would each wait as long
                    return None
                continue
            except (orjson.JSONDecodeError, AttributeError):
                continue
            if value:
                return str(value)
    return None


def collect(
    adapter: EngineAdapter,
    options: Mapping[str, Any],
    *,
    argv: list[str] | None = None,
    env: Mapping[str, str] | None = None,
    probe_version: bool = True,
) -> dict[str, Any]:
    """One provenance record for run.json."""
    return {
        "engine": adapter.name,
        "engine_version": engine_version(adapter, options) if probe_version else None,
        "engine_options": dict(options),
        "server_argv": argv,
        "server_env": dict(env) if env else {},
        "gpus": gpu_names(),
        "host": platform.node(),
        "platform": platform.platform(),
        "python_executable": sys.executable,
        "packages": package_versions(),
        "git_revision": git_revision(Path(__file__).resolve().parents[2]),
    }
