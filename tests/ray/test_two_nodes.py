"""A sweep on a simulated two-node Ray cluster (`ray.cluster_utils.Cluster`): runs spread over
both nodes, the summary equals the sequential sweep's, the report names the nodes, and a node
killed mid-sweep leaves its run re-run once on the other node and the results resumable."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pandas as pd
import pytest

from replay.sweep.lifecycle import group_alive
from replay.sweep.runner import run_sweep
from tests.ray.helpers import OBJECT_STORE_BYTES, comparable, experiment, nodes_of

ray = pytest.importorskip("ray", reason="the ray extra is not installed (make test-ray)")
pytestmark = pytest.mark.ray
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    # The head runs no runs (0 CPUs), so every run lands on one of two one-slot worker nodes.
    c = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,
            "object_store_memory": OBJECT_STORE_BYTES,
            "include_dashboard": False,
        },
    )
    workers = [c.add_node(num_cpus=1, object_store_memory=OBJECT_STORE_BYTES) for _ in range(2)]
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    yield c, workers
    ray.shutdown()
    c.shutdown()


def test_runs_spread_over_two_nodes_and_equal_the_sequential_sweep(tmp_path, cluster, sequential):
    exp = experiment(tmp_path, engine="sim-server", backend="ray")
    result = run_sweep(exp, results_root=tmp_path / "res", echo=lambda s: None)
    assert [o.status for o in result.outcomes] == ["ok"] * 6
    pd.testing.assert_frame_equal(
        comparable(result.exp_dir / "summary.parquet"),
        comparable(sequential["sim-server"] / "summary.parquet"),
    )
    _, workers = cluster
    nodes = nodes_of(result.exp_dir)
    want = {w.node_id[:8] for w in workers}
    assert {n.rsplit(" ", 1)[-1].rstrip(")") for n in nodes.values()} == want
    report = subprocess.run(
        [sys.executable, "-m", "replay.cli.main", "report", str(result.exp_dir)],
        capture_output=True, text=True, cwd=ROOT, check=True,
    )  # fmt: skip
    text = (result.exp_dir / "report.md").read_text() if report.returncode == 0 else ""
    row = next(line for line in text.splitlines() if line.startswith("| nodes |"))
    assert all(n in row for n in set(nodes.values()))


def _pgid(record: Path) -> int:
    """The process group a server.json names (read again while its writer is mid-write)."""
    for _ in range(100):
        try:
            return int(orjson.loads(record.read_bytes())["pgid"])
        except (orjson.JSONDecodeError, KeyError):
            time.sleep(0.01)
    raise AssertionError(f"{record} never held a whole record")


def test_a_node_killed_mid_sweep(tmp_path, cluster, sequential):
    """Kill a node while both run a server: that run is lost, runs once more on the other node,
    and the sweep ends with every run ok; a rerun skips them all."""
    c, workers = cluster
    exp = experiment(tmp_path, engine="sim-server", backend="ray")
    exp_dir = tmp_path / "res" / exp.name
    lines: list[str] = []
    killed: list[str] = []
    servers: list[int] = []  # the process groups of the servers running when the node died
    running = threading.Event()

    def echo(line: str) -> None:
        lines.append(line)

    def kill_a_busy_node():
        # a run's server has started once its server.json exists: with two, each node has one
        while len(list(exp_dir.glob("*/r*/server.json"))) < 2:
            if running.wait(0.05):
                return
        victim = workers[0]
        killed.append(victim.node_id[:8])
        servers.extend(_pgid(p) for p in exp_dir.glob("*/r*/server.json"))
        c.remove_node(victim)

    t = threading.Thread(target=kill_a_busy_node, daemon=True)
    t.start()
    try:
        result = run_sweep(exp, results_root=tmp_path / "res", echo=echo)
    finally:
        running.set()
        t.join()
    assert killed, "the sweep ended before a node could be killed"
    # the lost node's server is stopped too (by the run that ran again), not left an orphan
    assert len(servers) == 2 and not [g for g in servers if group_alive(g)], servers
    lost = [line for line in lines if "lost with" in line]
    # the run that was running there is named; a task Ray had placed there but not yet started
    # is lost too, with no node to name
    assert any(killed[0] in line for line in lost), lines
    assert all(line.endswith("once more") for line in lost), lines
    assert all(killed[0] in line or "never reported" in line for line in lost), lines
    assert [o.status for o in result.outcomes] == ["ok"] * 6
    # every run finished on the surviving node or before the kill; the summary is unchanged
    pd.testing.assert_frame_equal(
        comparable(result.exp_dir / "summary.parquet"),
        comparable(sequential["sim-server"] / "summary.parquet"),
    )
    for rel in (line.split(":")[0] for line in lost):
        doc = orjson.loads((exp_dir / rel / "run.json").read_bytes())
        assert killed[0] not in doc["provenance"]["node"]  # re-run elsewhere
    again = run_sweep(exp, results_root=tmp_path / "res", echo=lambda s: None)
    assert [o.status for o in again.outcomes] == ["skipped"] * 6
