"""The scaled WEKA traces the real-engine tiers and experiments/weka-*.toml replay: they are what
`replay trace import` + `replay trace scale` make (`make weka-traces`) from ../shared/traces/weka, and the send order the
vLLM tier predicts before its runs is the order the real driver sends in."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from replay.model.run_order import read_run_order
from replay.trace.io import read_trace
from tests.real.sequential_order import one_in_flight_order
from tests.shared_data import in_ci
from tests.test_trace_scale import SHARED, needs_shared

REPO = Path(__file__).resolve().parents[1]
MADE = REPO / ".cache" / "traces"  # where `make weka-traces` writes them
# scaled trace -> the WEKA conversations it is made from (K = 64, vocabulary 8192)
SCALED = {
    "weka-pair-k64.jsonl.gz": ["trace_0291.json", "trace_0485.json"],
    "weka-0277-k64.jsonl.gz": ["trace_0277.json"],
}


def _replay(*args: str, cwd: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "replay.cli.main", *args],
        cwd=cwd, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.fixture(scope="module")
def scaled(tmp_path_factory) -> dict[str, Path]:
    """The scaled traces, made here with the commands `make weka-traces` runs."""
    if not SHARED.is_dir():
        pytest.skip("../shared/traces not present")  # needs_shared fails it under CI first
    out = tmp_path_factory.mktemp("weka")
    made = {}
    for name, sources in SCALED.items():
        files = [str(SHARED / "weka" / f) for f in sources]
        _replay("trace", "import", "--from", "weka", *files, "-o", "full.jsonl.gz",
                "--vocab-size", "8192", cwd=out)  # fmt: skip
        _replay("trace", "scale", "full.jsonl.gz", "--tokens", "1/64", "-o", name, cwd=out)
        made[name] = out / name
    return made


@needs_shared
@pytest.mark.parametrize("name", sorted(SCALED))
def test_make_weka_traces_writes_what_the_commands_make(scaled, name):
    if not (MADE / name).exists():
        msg = f"{MADE / name}: run `make weka-traces` (CI does, before the tests)"
        if in_ci():
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    made, kept = read_trace(scaled[name]), read_trace(MADE / name)
    assert [c.ref for c in made.calls] == [c.ref for c in kept.calls]
    for t in made.tasks:
        for a, b in zip(made.steps(t), kept.steps(t), strict=True):
            assert np.array_equal(a.prompt, b.prompt) and np.array_equal(a.output, b.output)
            assert (a.call.gap_s, a.call.parent, a.call.after) == (
                b.call.gap_s, b.call.parent, b.call.after,
            )  # fmt: skip


@needs_shared
@pytest.mark.parametrize(
    "name, pool", [("weka-pair-k64.jsonl.gz", 2), ("weka-0277-k64.jsonl.gz", 1)]
)
def test_one_in_flight_order_is_the_drivers(scaled, tmp_path, name, pool):
    trace_path = scaled[name]
    _replay("run", "--trace", str(trace_path), "--out", "run", "--engine", "sim",
            "--pool", str(pool), "--gap-scale", "0", "--max-inflight", "1", cwd=tmp_path)  # fmt: skip
    trace = read_trace(trace_path)
    predicted = one_in_flight_order(trace, pool)
    assert read_run_order(tmp_path / "run") == predicted
    # the sub-agents really interleave: the order is not just the trace's
    assert predicted != [c.ref for c in trace.calls]
