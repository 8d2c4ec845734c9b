"""Fixtures of the Ray tier (`make test-ray`, marker `ray`): a sequential sweep to compare with,
computed once per session. Each test module starts one Ray (start-up is slow) and shuts it down."""

from __future__ import annotations

import pytest

from replay.sweep.runner import run_sweep
from tests.ray.helpers import experiment


@pytest.fixture(scope="session")
def sequential(tmp_path_factory):
    """results/<name>/ of the same sim-server and sim experiments, swept here one run at a time."""
    root = tmp_path_factory.mktemp("sequential")
    out = {}
    for engine in ("sim-server", "sim"):
        exp = experiment(root, engine=engine, name=engine)
        result = run_sweep(exp, results_root=root, echo=lambda s: None)
        assert all(o.status == "ok" for o in result.outcomes)
        out[engine] = result.exp_dir
    return out
