"""Fixtures of the real-vLLM tier (`make test-vllm`, marker `vllm`): CPU environment, tiny model,
servers launched on 127.0.0.1 through the project's own vLLM adapter and always stopped.

Importing this module needs nothing beyond the main environment: the default `make test` collects
tests/real too (its unmarked tests run, the marked ones are deselected).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
VLLM_PYTHON = Path(os.environ.get("REPLAY_VLLM_PYTHON", REPO / ".venv-vllm" / "bin" / "python"))
MODEL_DIR = Path(os.environ.get("REPLAY_TINY_MODEL_DIR", REPO / ".cache" / "tinyllama"))
SERVED_MODEL = "tiny"
BLOCK_TOKENS = 128  # vLLM's CPU backend block size; cached_tokens counts whole blocks
KV_BYTES_PER_TOKEN = 1024  # the tiny model: 2 x 2 layers x 2 KV heads x 64 x 2 bytes
READY_TIMEOUT_S = 600.0  # ~25 s on an idle 2-core machine; minutes when it is shared


def cpu_engine_options(kv_cache_memory_bytes: int, max_model_len: int = 4096) -> dict[str, Any]:
    """Engine options (as in an experiment's [engine] table) for the tiny model on vLLM's CPU
    backend; experiments/vllm-cpu.toml spells out the same.

    One process instead of three (engine core in the API server, worker in the engine core) halves
    the start-up time on two cores; caching behaves the same.
    """
    from replay.engines.vllm_forcing import PROCESSOR_FQCN

    return {
        "model": str(MODEL_DIR),
        "python": str(VLLM_PYTHON),
        "served_model_name": SERVED_MODEL,
        "load_format": "dummy",
        "kv_cache_memory_bytes": int(kv_cache_memory_bytes),
        "max_model_len": max_model_len,
        "enforce_eager": True,
        "logits_processors": PROCESSOR_FQCN,
        "extra_args": ["--distributed-executor-backend", "uni"],
        "env": {
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
            "HF_HUB_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
        },
    }


def usable_blocks(kv_cache_memory_bytes: int) -> int:
    """Blocks a request can hit in: vLLM keeps one block of the pool as its null block."""
    return kv_cache_memory_bytes // (BLOCK_TOKENS * KV_BYTES_PER_TOKEN) - 1


def ensure_tiny_model() -> Path:
    """Build the tiny Llama directory (offline, with the vLLM environment's `tokenizers`) unless
    a complete one is there."""
    if not VLLM_PYTHON.exists():
        raise RuntimeError(f"{VLLM_PYTHON} is missing: run `make test-vllm` (it builds .venv-vllm)")
    subprocess.run(
        [str(VLLM_PYTHON), "-m", "replay.engines.tinymodel", str(MODEL_DIR)],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=300,
    )
    return MODEL_DIR


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    try:
        return ensure_tiny_model()
    except (RuntimeError, subprocess.CalledProcessError) as e:
        pytest.fail(f"cannot build the tiny model: {e}")


@contextlib.contextmanager
def running_vllm(options: dict[str, Any], workdir: Path) -> Iterator[Any]:
    """Launch vLLM with `options` through the adapter; yield the ServerProcess; always stop it.

    The server runs in its own process group on a free 127.0.0.1 port, with its caches and
    temporary files in a directory removed afterwards.
    """
    from replay.engines import vllm
    from replay.sweep.lifecycle import ServerProcess, free_port

    workdir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="vllm-scratch-"))
    port = free_port()
    server = ServerProcess(
        vllm.launch(options, "127.0.0.1", port),
        workdir / "server.log",
        "127.0.0.1",
        port,
        cwd=str(REPO),
    )
    try:
        server.start({"VLLM_CACHE_ROOT": str(scratch / "cache"), "TMPDIR": str(scratch)})
        server.wait_ready(timeout_s=READY_TIMEOUT_S)
        yield server
    finally:
        server.stop(grace_s=10.0)
        shutil.rmtree(scratch, ignore_errors=True)


# The shared server: 16 MiB of KV = 128 blocks (127 usable) = 16K tokens, enough for the replay and
# WEKA tests to see reuse without evictions deciding the outcome.
SHARED_KV_BYTES = 16 << 20


@pytest.fixture(scope="session")
def vllm_server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One vLLM server for the tests that do not depend on the cache size."""
    with running_vllm(cpu_engine_options(SHARED_KV_BYTES), tmp_path_factory.mktemp("vllm")) as s:
        yield s


@pytest.fixture()
def clean_cache(vllm_server: Any) -> Any:
    """The shared server with an empty prefix cache (dev-mode /reset_prefix_cache)."""
    import httpx

    r = httpx.post(vllm_server.base_url + "/reset_prefix_cache", timeout=60)
    assert r.status_code == 200, r.text
    return vllm_server
