"""Running the project's own entry points from tests: the `replay` command in a fresh Python
(`replay_cli`), and a script under scripts/ loaded as a module by its path (`load_script`)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def replay_cli(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    """`replay ARGS...` in a child Python importing this checkout, its output captured."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = "from replay.cli.main import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
    )


def load_script(path: Path, name: str) -> ModuleType:
    """The script at `path` imported as module `name` (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
