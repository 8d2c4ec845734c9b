"""Inside the vLLM environment, without a server: the forcing processor against vLLM's real
BatchUpdate types and torch tensors, and the tiny model directory loaded by transformers."""

from __future__ import annotations

import subprocess

import pytest

from tests.real.conftest import REPO, VLLM_PYTHON

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(300)]


def test_processor_and_tiny_model_in_the_vllm_environment():
    if not VLLM_PYTHON.exists():
        pytest.fail(f"{VLLM_PYTHON} is missing: run `make test-vllm` (it builds .venv-vllm)")
    proc = subprocess.run(
        [str(VLLM_PYTHON), str(REPO / "tests" / "real" / "vllm_env_checks.py")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert proc.stdout.split() == ["processor", "ok", "tiny", "model", "ok"]
