"""The node side of a Ray sweep without Ray: a cancelled task stops the server its own run
recorded, and no other run's (two slots on one node share the host and the results)."""

from __future__ import annotations

import sys

from replay.engines.base import LaunchSpec
from replay.sweep.lifecycle import SERVER_RECORD, ServerProcess, group_alive, stop_recorded_server

SLEEPER = LaunchSpec(argv=[sys.executable, "-c", "import time; time.sleep(120)"])


def test_stop_recorded_server_stops_only_that_runs_server(tmp_path):
    mine = ServerProcess(SLEEPER, tmp_path / "a" / "r0" / "server.log", "127.0.0.1", 0)
    other = ServerProcess(SLEEPER, tmp_path / "b" / "r0" / "server.log", "127.0.0.1", 0)
    mine.start()
    other.start()
    try:
        assert mine.pgid is not None and other.pgid is not None
        assert stop_recorded_server(tmp_path / "a" / "r0", grace_s=2.0) == mine.pgid
        assert not group_alive(mine.pgid)
        assert not (tmp_path / "a" / "r0" / SERVER_RECORD).exists()
        assert group_alive(other.pgid) and (tmp_path / "b" / "r0" / SERVER_RECORD).exists()
        # stopped already, or never started: nothing to do, and no error
        assert stop_recorded_server(tmp_path / "a" / "r0", grace_s=2.0) is None
        assert stop_recorded_server(tmp_path / "c" / "r0", grace_s=2.0) is None
    finally:
        mine.stop(2.0)
        other.stop(2.0)
    assert not (tmp_path / "b" / "r0" / SERVER_RECORD).exists()
