"""The cluster table, each run's resource request, the lost-run rule and the progress line:
pure logic, run in the default suite (no Ray needed)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from replay.engines.registry import get_engine
from replay.errors import ConfigError
from replay.sweep.cluster_plan import MAX_ATTEMPTS, Board, resources_lines, run_resources
from replay.sweep.config import Cluster, load_experiment

ROOT = Path(__file__).resolve().parents[2]

BASE = """
name = "c"
repeats = 2
[trace]
synth = { preset = "swe-agent", tasks = 2, seed = 1, max_calls_per_task = 3 }
[run]
pool = 2
[engine]
kind = "sim"
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.toml"
    p.write_text(BASE + text)
    return p


def test_cluster_table_defaults_to_a_local_sweep(tmp_path):
    exp = load_experiment(write(tmp_path, ""))
    assert exp.cluster == Cluster()
    assert exp.cluster.backend == "local"


def test_cluster_table_is_read(tmp_path):
    text = '[cluster]\nbackend = "ray"\naddress = "local"\nlocal_cpus = 2\nresults = "ship"\n'
    exp = load_experiment(write(tmp_path, text))
    assert exp.cluster == Cluster(backend="ray", address="local", results="ship", local_cpus=2)


@pytest.mark.parametrize(
    ("text", "field", "why"),
    [
        ('[cluster]\nbackend = "slurm"\n', "cluster.backend", "'local' or 'ray'"),
        ("[cluster]\nlocal_cpus = 0\n", "cluster.local_cpus", "greater than or equal to 1"),
        ("[cluster]\nnodes = 3\n", "cluster.nodes", "unknown key"),
        ('[cluster]\nresources = { GPU = "two" }\n', "cluster.resources", "number"),
    ],
)
def test_bad_cluster_table_names_the_key_and_line(tmp_path, text, field, why):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_experiment(path)
    assert e.value.field is not None and e.value.field.startswith(field)
    assert why in e.value.why
    assert e.value.where.startswith(f"{path}:")  # the line that sets it


def test_resources_come_from_the_adapter():
    assert get_engine("sim").needs({"tp": 8}) == {"CPU": 1.0}  # simulated GPUs are host CPU
    assert get_engine("sim-server").needs({"tp": 8}) == {"CPU": 1.0}
    assert get_engine("llamacpp").needs({}) == {"CPU": 1.0}
    assert get_engine("vllm").needs({"tp": 2}) == {"GPU": 2.0}
    assert get_engine("sglang").needs({}) == {"GPU": 1.0}
    assert get_engine("lmcache").needs({"tp": 4}) == {"GPU": 4.0}


def test_a_cpu_build_asks_one_cpu_and_a_bad_device_is_refused():
    assert get_engine("vllm").needs({"tp": 2, "device": "cpu"}) == {"CPU": 1.0}
    assert get_engine("vllm").needs({"tp": 2, "device": "gpu"}) == {"GPU": 2.0}
    assert get_engine("lmcache").needs({"tp": 4, "device": "cpu"}) == {"CPU": 1.0}
    with pytest.raises(ConfigError, match="engine.device"):
        get_engine("vllm").needs({"device": "tpu"})


def test_dry_run_ray_of_the_vllm_cpu_experiments_asks_no_gpu():
    """The CPU experiments launch vLLM's CPU build: a cluster must give them a CPU, since a
    CPU-only cluster has no GPU to give and would queue them forever."""
    out = subprocess.run(
        [sys.executable, "-m", "replay.cli.main", "sweep", "experiments/vllm-cpu.toml",
         "--dry-run", "--ray"],
        capture_output=True, text=True, cwd=ROOT, check=True,
    ).stdout  # fmt: skip
    tasks = out.split("\nray: ", 1)[1].splitlines()[1:]
    assert len(tasks) == 3 and all(line.endswith(": {CPU=1}") for line in tasks), out
    # the WEKA one needs its scaled trace (make weka-traces) to load; its engine table does not
    engine = tomllib.loads((ROOT / "experiments/weka-vllm-cpu.toml").read_text())["engine"]
    assert get_engine("vllm").needs(engine) == {"CPU": 1.0}


def test_matrix_of_engines_asks_per_point(tmp_path):
    text = '[matrix]\nengine = ["sim", "sim-server"]\n'
    exp = load_experiment(write(tmp_path, text))
    assert [run_resources(exp, p) for p in exp.points()] == [{"CPU": 1.0}, {"CPU": 1.0}]
    exp2 = load_experiment(write(tmp_path, "[cluster]\nresources = { CPU = 4, GPU = 0.5 }\n"))
    assert run_resources(exp2, exp2.points()[0]) == {"CPU": 4, "GPU": 0.5}


def test_dry_run_ray_prints_each_runs_resources(tmp_path):
    path = write(tmp_path, "[matrix]\nhost_tier_gib = [0, 2]\n")
    out = subprocess.run(
        [sys.executable, "-m", "replay.cli.main", "sweep", str(path), "--dry-run", "--ray"],
        capture_output=True, text=True, cwd=ROOT, check=True,
    ).stdout  # fmt: skip
    exp = load_experiment(path)
    assert out.rstrip().endswith("\n".join(resources_lines(exp)))
    assert "ray: 4 task(s)" in out
    assert out.count(": {CPU=1}") == 4


def test_ray_missing_says_what_to_install(tmp_path):
    path = write(tmp_path, "")
    code = (
        "import sys; sys.modules['ray'] = None; from replay.cli.main import main; "
        f"sys.argv = ['replay', 'sweep', {str(path)!r}, '--ray', '--results', "
        f"{str(tmp_path / 'res')!r}]; main()"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    # from this checkout: PyPI's "replay" is another project
    assert "make setup-ray" in proc.stderr and "pip install -e '.[ray]'" in proc.stderr
    assert "pip install 'replay[ray]'" not in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "res").exists()  # nothing touched before the check


def test_a_lost_run_runs_once_more_then_fails():
    board = Board(total=1)
    board.submitted("p/r0")
    board.started("p/r0", "node-a", 0.0)
    assert board.lost("p/r0") == (True, "node-a")
    board.submitted("p/r0")  # the head resubmits
    assert board.node_of("p/r0") is None  # queued again, on no node yet
    board.started("p/r0", "node-b", 5.0)
    assert board.lost("p/r0") == (False, "node-b")
    assert MAX_ATTEMPTS == 2


def test_progress_line_and_eta():
    board = Board(total=4)
    for key in ("a/r0", "b/r0", "a/r1", "b/r1"):
        board.submitted(key)
    assert board.progress_line(0.0) == "ray: 0/4 done, 0 running, 4 queued, ETA unknown"
    board.started("a/r0", "n1", 0.0)
    board.started("b/r0", "n2", 0.0)
    assert board.finished("a/r0", 10.0) == "n1"
    board.started("a/r1", "n1", 10.0)
    # mean 10 s; one queued (10 s) + b/r0 done (0 s left) + a/r1 fresh (10 s), over 2 running
    assert board.eta_s(10.0) == pytest.approx(10.0)
    assert board.progress_line(10.0) == "ray: 1/4 done, 2 running (n1, n2), 1 queued, ETA 10s"
    board.started("b/r1", "n1", 11.0)
    assert "3 running (n1 x2, n2)" in board.progress_line(11.0)
