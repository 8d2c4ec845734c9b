"""The CLI imports a subcommand's module only when that subcommand runs: `replay run` does not
pay for the sweep, doctor or predict modules (pydantic, aiohttp, prometheus_client, pandas), and
a real run over the default transport loads neither pandas (calls.parquet is written without it)
nor aiohttp, nor httpx (its scrapes and probes are plain standard-library GETs)."""

from __future__ import annotations

import subprocess
import sys

import pyarrow.parquet as pq

from replay.cli.main import cli
from replay.trace.io import write_trace
from replay.trace.synth import synth
from tests.servers import FaultServer

HEAVY = ("pandas", "matplotlib", "pydantic", "rich", "numba", "prometheus_client", "aiohttp")


def _loaded_after(argv: list[str]) -> set[str]:
    """Top-level modules in sys.modules after `replay ARGV` ran in a fresh interpreter."""
    code = (
        "import sys\nfrom replay.cli.main import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.splitlines()[-1]
    return set(out.split())


def test_run_help_imports_no_heavy_package():
    loaded = _loaded_after(["run", "--help"])
    assert "click" in loaded  # the probe sees imports at all
    assert sorted(loaded & set(HEAVY)) == []


def test_a_real_run_imports_no_pandas_matplotlib_pydantic_aiohttp_or_httpx(tmp_path):
    trace = tmp_path / "t.jsonl.gz"
    write_trace(synth("claude-code", tasks=2, seed=2, scale=0.01, max_calls_per_task=3), trace)
    out = tmp_path / "run"
    with FaultServer(model="m") as srv:
        loaded = _loaded_after(["run", "--trace", str(trace), "--pool", "2", "--out", str(out),
                                "--url", srv.url, "--gap-scale", "0.001", "--quiet"])  # fmt: skip
        calls = len(srv.seen)
    assert calls > 0 and pq.read_table(out / "calls.parquet").num_rows == calls
    assert "replay" in loaded and "orjson" in loaded  # the probe sees the run's imports
    unwanted = {"pandas", "matplotlib", "pydantic", "aiohttp", "numba", "httpx", "rich"}
    assert sorted(loaded & unwanted) == []


def test_sweep_still_loads_its_own_dependencies():
    # the other side: a command that needs pydantic gets it, so the probe can fail
    assert "pydantic" in _loaded_after(["sweep", "--help"])


def test_every_command_is_listed_and_loads():
    names = cli.list_commands(None)  # type: ignore[arg-type]
    assert names == sorted(names)
    for name in names:
        cmd = cli.get_command(None, name)  # type: ignore[arg-type]
        assert cmd is not None and cmd.name == name
    assert cli.get_command(None, "nope") is None  # type: ignore[arg-type]
    trace = cli.get_command(None, "trace")  # type: ignore[arg-type]
    assert {"scale", "slice", "merge", "validate"} <= set(trace.commands)  # type: ignore[attr-defined]
