"""`benchmarks.common.pinned_apart`: the drift benchmarks' server on one core, the client on the
others, both put back afterwards (real processes, real affinity; no timing)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from benchmarks.common import pinned_apart, split_cores


@pytest.fixture
def server():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_split_cores_partitions_this_process_cores():
    server_cpus, client_cpus = split_cores()
    mine = os.sched_getaffinity(0)
    assert server_cpus | client_cpus == mine
    assert len(server_cpus) == 1
    if len(mine) > 1:
        assert not server_cpus & client_cpus


def test_pinned_apart_pins_then_restores(server):
    mine = os.sched_getaffinity(0)
    srv_before = os.sched_getaffinity(server.pid)
    server_cpus, client_cpus = split_cores()
    with pinned_apart(server.pid) as pins:
        assert os.sched_getaffinity(server.pid) == server_cpus
        assert os.sched_getaffinity(0) == client_cpus
        assert pins == {
            "pinned": True,
            "server_cpus": sorted(server_cpus),
            "client_cpus": sorted(client_cpus),
        }
    assert os.sched_getaffinity(0) == mine
    assert os.sched_getaffinity(server.pid) == srv_before


def test_pinned_apart_off_changes_nothing(server):
    mine = os.sched_getaffinity(0)
    with pinned_apart(server.pid, on=False) as pins:
        assert pins == {"pinned": False}
        assert os.sched_getaffinity(0) == mine


def test_pinned_apart_restores_after_an_error_and_a_gone_server(server):
    mine = os.sched_getaffinity(0)
    with pytest.raises(RuntimeError), pinned_apart(server.pid):
        server.kill()
        server.wait()
        raise RuntimeError("a drift run failed")
    assert os.sched_getaffinity(0) == mine
