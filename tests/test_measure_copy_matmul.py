"""scripts/measure_copy_matmul.py, the copy and matmul measurement a GPU session runs for a
measured `h200` preset: its line fit separates a fixed per-chunk cost from bandwidth exactly,
it runs end to end on the CPU with torch (small sizes) and writes every field, and without torch
it says so in one line, exit 2."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.subprocess_helpers import load_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "measure_copy_matmul.py"
TORCH_PYTHON = Path(os.environ.get("REPLAY_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))


def test_line_fit_separates_a_fixed_chunk_cost_from_bandwidth():
    fit_line = load_script(SCRIPT, "measure_copy_matmul").fit_line
    # 20 us per chunk + 50 GB/s, at the two chunk sizes the script measures
    sizes = [256 * 24_576, 1024 * 24_576]
    line = fit_line(sizes, [20e-6 + b / 50e9 for b in sizes])
    assert line["fixed_s"] == pytest.approx(20e-6, rel=1e-9)
    assert line["bytes_per_s"] == pytest.approx(50e9, rel=1e-9)
    assert fit_line(sizes, [1e-3, 1e-3])["bytes_per_s"] is None  # no growth: no bandwidth
    with pytest.raises(ValueError, match="two chunk sizes"):
        fit_line([sizes[0], sizes[0]], [1e-3, 2e-3])


def test_without_torch_it_says_so_in_one_line_and_exits_2(tmp_path):
    pytest.importorskip("numpy")  # the project's own environment, which has no torch
    if importlib.util.find_spec("torch") is not None:
        pytest.skip("this environment has torch")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "-o", str(tmp_path / "x.json")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "torch is not installed" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.json").exists()


@pytest.mark.skipif(not TORCH_PYTHON.exists(), reason=f"{TORCH_PYTHON} (torch on CPU) is missing")
def test_runs_on_cpu_with_torch_and_writes_every_field(tmp_path):
    out = tmp_path / "m.json"
    done = subprocess.run(
        [str(TORCH_PYTHON), str(SCRIPT), "--small", "--repeats", "2", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    prov = doc["provenance"]
    assert prov["small"] is True and prov["cuda"] is None and prov["device"].startswith("cpu")
    # on a CPU only pageable copies: 2 directions x 2 chunk sizes x (one, batched)
    assert len(doc["copies"]) == 8 and all(c["seconds_per_chunk"] > 0 for c in doc["copies"])
    assert {(c["tokens"], c["bytes"]) for c in doc["copies"]} == {(4, 1024), (16, 4096)}
    assert len(doc["copy_lines"]) == 4  # one line per direction x mode
    # 2 prefill sizes x 4 projection shapes, each with a positive rate
    assert len(doc["matmuls"]) == 8 and all(m["flops_per_s"] > 0 for m in doc["matmuls"])
    assert set(doc["preset"]) == {
        "host_link_bytes_per_s",
        "transfer_overhead_s",
        "peak_bf16_flops_per_s",
    }
