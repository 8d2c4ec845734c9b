"""`replay sweep --ray` in a fresh process, around Ray's start: a cluster that does not answer
leaves the results folder as it was (--force had set every finished run aside first), a run no
node of a private Ray can take is refused instead of waiting forever, and SIGTERM stops a Ray
sweep as Ctrl-C does (Ray's own SIGTERM handler had ended it with a C++ stack dump, exit 134)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from replay.sweep.runner import run_sweep
from tests.ray.helpers import experiment

pytest.importorskip("ray", reason="the ray extra is not installed (make test-ray)")
pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[2]


def _sweep_cli(toml: Path, results: Path, *args: str) -> list[str]:
    code = (
        "import sys; from replay.cli.main import main; "
        f"sys.argv = ['replay', 'sweep', {str(toml)!r}, '--results', {str(results)!r}, "
        f"*{list(args)!r}]; main()"
    )
    return [sys.executable, "-c", code]


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.name != ".lock")


def test_force_against_a_cluster_that_does_not_answer_touches_nothing(tmp_path):
    exp = experiment(tmp_path, engine="sim", name="done")
    run_sweep(exp, results_root=tmp_path / "res", echo=lambda s: None)
    before = _tree(tmp_path / "res")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{s.getsockname()[1]}"
    t0 = time.monotonic()
    proc = subprocess.run(
        _sweep_cli(Path(exp.source), tmp_path / "res", "--force", "--ray", closed),
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2 and "nothing answers" in proc.stderr, proc.stderr[-2000:]
    assert time.monotonic() - t0 < 60  # Ray's own retries took ~14 minutes
    assert _tree(tmp_path / "res") == before  # no run set aside, no plan rewritten


def test_a_run_no_node_of_a_private_ray_can_take_is_refused(tmp_path):
    exp = experiment(tmp_path, engine="sim", name="gpu")
    toml = Path(exp.source)
    toml.write_text(toml.read_text() + "[cluster]\nlocal_cpus = 1\nresources = { GPU = 1 }\n")
    proc = subprocess.run(
        _sweep_cli(toml, tmp_path / "res", "--ray", "local"),
        capture_output=True, text=True, cwd=ROOT, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "a run asks for GPU=1 (the cluster has 0): no node can run it" in proc.stderr
    assert not (tmp_path / "res" / "gpu" / "plan.json").exists()


def test_sigterm_stops_a_ray_sweep_as_ctrl_c_does(tmp_path):
    exp = experiment(tmp_path, engine="sim-server", name="term")
    toml = Path(exp.source)
    toml.write_text(toml.read_text() + "[cluster]\nlocal_cpus = 1\n")
    proc = subprocess.Popen(
        _sweep_cli(toml, tmp_path / "res", "--ray", "local"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
        start_new_session=True,
    )  # fmt: skip
    try:
        lines = []
        assert proc.stdout is not None
        for line in proc.stdout:  # the first finished run: Ray is up and the sweep is running
            lines.append(line)
            if line.startswith("[1/"):
                break
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:  # a failure above must not leave the sweep or its Ray running
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = "".join(lines) + out
    assert proc.returncode == 130, text[-3000:]
    assert "interrupted; rerun the same command to resume" in text
    assert "Aborted" not in text and "SIGTERM received" not in text
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)  # nothing of its session left: Ray's processes went with it
