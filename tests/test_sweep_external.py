"""`external` engine: a server the user runs. Here the simulator's server, started by the test,
stands in; the sweep warms it up, resets its cache (checked), scrapes and replays."""

from __future__ import annotations

import sys

import orjson
import pytest

from replay.engines.base import LaunchSpec
from replay.engines.sim_engines import SIM_SERVER
from replay.errors import EngineError
from replay.metrics.scrape import http_client
from replay.sweep.config import load_experiment
from replay.sweep.control import probe_cached_tokens, reset_and_check
from replay.sweep.lifecycle import ServerProcess
from replay.sweep.prepare import load_trace
from replay.sweep.runner import run_sweep


@pytest.fixture
def sim_server(tmp_path):
    spec = SIM_SERVER.launch(
        {"tp": 8, "device_kv_gib": 0.5, "python": sys.executable}, "127.0.0.1", 0
    )
    assert isinstance(spec, LaunchSpec)
    server = ServerProcess(spec, tmp_path / "sim.log", "127.0.0.1", 0)
    server.start()
    try:
        server.wait_ready(60)
        yield server
    finally:
        server.stop(5)


def test_reset_is_checked(sim_server):
    url = sim_server.base_url
    assert reset_and_check(url, "/reset_prefix_cache", None) is True
    with http_client(url, 30) as client:
        assert probe_cached_tokens(client, url, None) == 0  # the final reset removed the probe
        assert probe_cached_tokens(client, url, None) > 0  # ...and the cache works again
    with pytest.raises(EngineError, match="HTTP 405"):
        reset_and_check(url, "/v1/models", None)


def test_external_sweep_counts_only_the_replay(sim_server, tmp_path):
    p = tmp_path / "e.toml"
    p.write_text(
        f"""
name = "e"
[trace]
synth = {{ preset = "swe-agent", tasks = 3, seed = 2, max_calls_per_task = 4, max_prompt_tokens = 20000 }}
[run]
pool = 2
gap_scale = 0.0
[engine]
kind = "external"
url = "{sim_server.base_url}/v1"
[warmup]
requests = 2
[predict]
enabled = false
"""
    )
    exp = load_experiment(p)
    result = run_sweep(exp, results_root=tmp_path / "results", echo=lambda s: None)
    (o,) = result.outcomes
    assert o.status == "ok"
    counters = orjson.loads((result.exp_dir / o.rel_dir / "counters.json").read_bytes())
    trace = load_trace(exp)
    # warm-up requests and reset probes happened before the start scrape: not counted
    assert counters["prompt_tokens"] == trace.prompt_tokens
    doc = orjson.loads((result.exp_dir / o.rel_dir / "run.json").read_bytes())
    assert doc["server"]["url"] == sim_server.base_url and "pid" not in doc["server"]
    assert sim_server.alive()  # external servers are never stopped by the sweep
