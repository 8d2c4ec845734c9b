"""Helpers of the real llama.cpp tier (`make test-llamacpp`, marker `llamacpp`): a server launched
through the project's own adapter and lifecycle (always stopped), chain traces, and reading a run
directory back into the whole-prompt model's inputs.

Not a pytest conftest (tests/real/conftest.py belongs to the vLLM tier): the llama.cpp test modules
import what they need from here. Importing it needs only the main environment.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from replay.trace.model import Call, Trace, TraceHeader

REPO = Path(__file__).resolve().parents[2]
VOCAB = 8192  # the tiny GGUF's vocab (replay.engines.gguf_tiny default)
BYTES_PER_TOKEN = 2060.0  # replay.engines.llamacpp: KV 2048 + 12 bytes of cell metadata
OVERHEAD_BYTES = 64.0


def require_xllamacpp() -> None:
    """The tier's tests fail (not skip) without the wheel: a skipped tier would look green."""
    missing = [
        m for m in ("xllamacpp", "gguf", "tokenizers") if importlib.util.find_spec(m) is None
    ]
    if missing:
        pytest.fail(
            f"missing {', '.join(missing)}: run `make test-llamacpp` (installs the llamacpp extra)"
        )


@contextlib.contextmanager
def llamacpp_server(run_dir: Path, model_dir: Path, **options: Any) -> Iterator[str]:
    """Start llama.cpp's server with the adapter's argv (wheel runner, port from its ready file),
    yield its base URL, and always stop its whole process group."""
    from replay.engines.llamacpp import ADAPTER
    from replay.sweep.lifecycle import ServerProcess

    require_xllamacpp()
    opts = {"model": "tiny", "model_dir": str(model_dir), "threads": 1, **options}
    spec = ADAPTER.launch(opts, "127.0.0.1", 0)
    run_dir.mkdir(parents=True, exist_ok=True)
    server = ServerProcess(spec, run_dir / "server.log", "127.0.0.1", 0)
    server.start()
    try:
        server.wait_ready(120.0)
        yield server.base_url
    finally:
        server.stop(10.0)


def chain_trace(
    agents: int, calls: int, first: int, append: int, out: int, *, seed: int = 0, gap_s: float = 0.0
) -> Trace:
    """Agents whose every call keeps the whole previous context (prompt + recorded output) and
    appends `append` fresh tokens; token ids drawn in [2, VOCAB) from a seeded generator."""
    rng = np.random.default_rng(seed)
    cs = []
    for a in range(agents):
        ctx = 0
        for k in range(calls):
            n = first if k == 0 else append
            app = rng.integers(2, VOCAB, n).astype(np.int32)
            keep = 0 if k == 0 else ctx
            plen = keep + n
            cs.append(Call(f"agent{a}", k, gap_s, keep, app, plen, out))
            ctx = plen + out
    return Trace(TraceHeader(tokens="ids", vocab_size=VOCAB), cs)


def metric(text: str, name: str) -> float:
    """One unlabelled sample of llama.cpp's /metrics text."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def read_calls(run_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(run_dir / "calls.parquet")


def failed_calls(calls: pd.DataFrame, server_log: Path, tail_lines: int = 30) -> str:
    """What a failed run's calls and server said, for an assertion message: a test that only
    says `'errors' != 'ok'` leaves a CI failure unexplained."""
    bad = calls[calls["status"] != "ok"]
    cols = [c for c in ("task", "call", "status", "error_kind", "error") if c in bad.columns]
    log = server_log.read_text(errors="replace").splitlines() if server_log.exists() else []
    return (
        f"{len(bad)} of {len(calls)} calls failed:\n{bad[cols].to_string(index=False)}\n"
        f"server log tail:\n" + "\n".join(log[-tail_lines:])
    )


def observed_events(calls: pd.DataFrame) -> list[tuple[tuple[str, int], float, float]]:
    """(call ref, send time, end time) of every call of a run, for `simulate_timed`."""
    return [
        ((str(r.task), int(r.call)), float(r.t_send), float(r.t_end))
        for r in calls.itertuples(index=False)
    ]


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def env_with_cache(model_dir: Path) -> dict[str, str]:
    """Environment for `replay` subprocesses: the tiny model is written under `model_dir`."""
    return {**os.environ, "REPLAY_CACHE_DIR": str(model_dir)}
