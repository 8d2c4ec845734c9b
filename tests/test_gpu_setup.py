"""GPU set-up without installing anything: `make setup-gpu` resolves to the script with the
adapters' pinned versions, the experiment files name the environments it builds, and `replay
model fetch` runs the download in the interpreter it is given."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from replay.engines import lmcache, preflight, sglang, vllm
from replay.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "setup-gpu.sh"
PY_ENV = {**os.environ, "REPLAY_PYTHON": sys.executable}


def test_make_setup_gpu_runs_the_script_for_the_engine():
    done = subprocess.run(
        ["make", "-n", "setup-gpu", "ENGINE=sglang"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert 'bash scripts/setup-gpu.sh "sglang" .venv-gpu-sglang' in done.stdout
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0


@pytest.mark.parametrize(
    "engine, wanted",
    [
        ("vllm", f"vllm=={vllm.PINNED_VERSION}"),
        ("sglang", f"sglang=={sglang.PINNED_VERSION}"),
        ("lmcache", f"vllm=={vllm.PINNED_VERSION} lmcache=={lmcache.PINNED_VERSION}"),
    ],
)
def test_setup_installs_the_pinned_versions(engine, wanted, tmp_path):
    done = subprocess.run(
        ["bash", str(SCRIPT), engine, str(tmp_path / "venv")],
        cwd=ROOT, capture_output=True, text=True, env={**PY_ENV, "DRY_RUN": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"with: {wanted} huggingface_hub, then replay --no-deps" in done.stdout
    assert not (tmp_path / "venv").exists()


def test_setup_refuses_an_unknown_engine():
    done = subprocess.run(
        ["bash", str(SCRIPT), "tgi"], cwd=ROOT, capture_output=True, text=True, env=PY_ENV
    )
    assert done.returncode == 2 and "ENGINE must be vllm, sglang or lmcache" in done.stderr
    with pytest.raises(ConfigError, match="valid: lmcache, sglang, vllm"):
        preflight.requirements("tgi")


def test_gpu_experiments_name_the_environment_of_their_engine():
    named = 0
    for path in sorted((ROOT / "experiments").glob("*.toml")):
        engine = tomllib.loads(path.read_text())["engine"]
        tables = [engine] + [engine[k] for k in ("vllm", "sglang", "lmcache") if k in engine]
        for table in tables:
            kind = table.get("kind") if table is engine else next(
                k for k in ("vllm", "sglang", "lmcache") if engine.get(k) is table
            )  # fmt: skip
            python = table.get("python")
            if kind in preflight.ENGINE_PACKAGES and python and "gpu" in python:
                assert python == f".venv-gpu-{kind}/bin/python", path.name
                named += 1
    assert named >= 7  # vllm-offload, lmcache, sglang-hicache, paper-h20-vllm, compare-engines x3


def test_model_fetch_runs_snapshot_download_in_the_given_interpreter(tmp_path, monkeypatch):
    # huggingface_hub is the engine environments'; a stand-in module records the call here.
    hub = tmp_path / "huggingface_hub"
    hub.mkdir()
    (hub / "__init__.py").write_text(
        "def snapshot_download(repo_id, revision=None):\n"
        "    return f'/cache/{repo_id}@{revision}'\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-m", "replay.cli.main", "model", "fetch", "org/tiny", "--revision", "v1"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "/cache/org/tiny@v1"


def fetch(*args: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "replay.cli.main", "model", "fetch", *args]
    return subprocess.run(argv, capture_output=True, text=True)


def test_model_fetch_fails_clearly(tmp_path):
    # A bare venv: no huggingface_hub whatever this machine has installed (and no download try).
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    no_hub = fetch("org/tiny", "--python", str(bare / "bin" / "python"))
    assert no_hub.returncode == 2
    assert "no huggingface_hub in this interpreter" in no_hub.stderr
    missing = fetch("org/tiny", "--python", str(tmp_path / "none"))
    assert missing.returncode == 2
    assert re.search(r"cannot run .*make setup-gpu", missing.stderr)
    assert missing.stderr.count("\n") == 1
    local = fetch(str(tmp_path))
    assert local.returncode == 2 and "is a local path" in local.stderr
