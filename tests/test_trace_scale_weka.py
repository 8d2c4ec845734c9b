"""The scaled WEKA traces the real-engine tiers and experiments/weka-*.toml replay: they are what
`replay trace import` + `replay trace scale` make from ../shared/traces/weka, and the send order the
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
from tests.test_trace_scale import SHARED, needs_shared

REPO = Path(__file__).resolve().parents[1]
# committed scaled trace -> the WEKA conversations it is made from (K = 64, vocabulary 8192)
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


@needs_shared
@pytest.mark.parametrize("name", sorted(SCALED))
def test_committed_scaled_traces_are_what_the_commands_make(tmp_path, name):
    files = [str(SHARED / "weka" / f) for f in SCALED[name]]
    _replay("trace", "import", "--from", "weka", *files, "-o", "full.jsonl.gz",
            "--vocab-size", "8192", cwd=tmp_path)  # fmt: skip
    _replay("trace", "scale", "full.jsonl.gz", "--tokens", "1/64", "-o", "s.jsonl.gz", cwd=tmp_path)
    made, kept = read_trace(tmp_path / "s.jsonl.gz"), read_trace(REPO / "traces" / name)
    assert [c.ref for c in made.calls] == [c.ref for c in kept.calls]
    for t in made.tasks:
        for a, b in zip(made.steps(t), kept.steps(t), strict=True):
            assert np.array_equal(a.prompt, b.prompt) and np.array_equal(a.output, b.output)
            assert (a.call.gap_s, a.call.parent, a.call.after) == (
                b.call.gap_s, b.call.parent, b.call.after,
            )  # fmt: skip


@pytest.mark.parametrize(
    "name, pool", [("weka-pair-k64.jsonl.gz", 2), ("weka-0277-k64.jsonl.gz", 1)]
)
def test_one_in_flight_order_is_the_drivers(tmp_path, name, pool):
    trace_path = REPO / "traces" / name
    _replay("run", "--trace", str(trace_path), "--out", "run", "--engine", "sim",
            "--pool", str(pool), "--gap-scale", "0", "--max-inflight", "1", cwd=tmp_path)  # fmt: skip
    trace = read_trace(trace_path)
    predicted = one_in_flight_order(trace, pool)
    assert read_run_order(tmp_path / "run") == predicted
    # the sub-agents really interleave: the order is not just the trace's
    assert predicted != [c.ref for c in trace.calls]
