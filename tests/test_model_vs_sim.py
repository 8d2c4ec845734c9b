"""Predictions fed a simulated run's own call times match the simulator's counters.

The simulator runs write-through, `all` admission and a pure LRU host tier; the model gets the
run's schedule (lookup at `t_send`, prefill end at `t_first_token`, end at `t_end`) and must land
within 2% on computed prefill and host restores at every tier size. A counter that is a sliver of
the prompt tokens (under 5%) is held to 0.2% of the prompt tokens instead, since 2% of almost
nothing is below the model's granularity (one chunk of one call).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from replay.driver.options import RunOptions
from replay.model.predict import predict_tiers
from replay.model.run_order import read_run_schedule
from replay.sim.options import SimConfig
from replay.trace.synth import synth
from tests.model_traces import at_the_old_pace
from tests.shared_data import SHARED, require_shared
from tests.sim_helpers import replay_on_sim

WEKA = SHARED / "traces" / "weka"
COUNTERS = ("computed_prefill_tokens", "host_restore_tokens")


def _sim_then_predict(trace, pool: int, device_gib: float, host_gib: float, out: Path) -> None:
    cfg = SimConfig(
        hardware="h20",
        model="qwen3-coder-30b-a3b",
        tp=8,
        device_kv_gib=device_gib,
        host_tier_gib=host_gib,
        admission="all",
        write_policy="write-through",
    )
    summary = replay_on_sim(trace, cfg, RunOptions(pool=pool), out)
    assert summary["status"] == "ok" and summary["errors"] == 0
    predicted = predict_tiers(
        trace,
        pool=pool,
        bytes_per_token=cfg.bytes_per_token,
        chunk_tokens=cfg.chunk_tokens,
        device_tokens=cfg.device_blocks * cfg.block_tokens,
        tiers_gib=[host_gib],
        order=read_run_schedule(out),
        block_tokens=cfg.block_tokens,
        offload_pays=False,
    )
    (row,) = predicted["tiers"]
    prompt = trace.prompt_tokens
    for name in COUNTERS:
        sim, pred = summary[name], row[name]
        tol = 0.02 * sim if sim >= 0.05 * prompt else 0.002 * prompt
        assert abs(pred - sim) <= tol, (host_gib, name, sim, pred)


@pytest.fixture(scope="module")
def small_swe_agent():
    # sixteen agents on a device of ~11K tokens with prompts up to 6K: real device pressure
    return at_the_old_pace(synth("swe-agent", tasks=32, seed=3, scale=0.1, max_prompt_tokens=6000))


@pytest.mark.slow
@pytest.mark.parametrize("host_gib", [0.0, 0.2, 0.4, 0.8])
def test_synthetic_swe_agent_pool_16(small_swe_agent, host_gib, tmp_path):
    _sim_then_predict(small_swe_agent, 16, 0.25, host_gib, tmp_path)


@pytest.fixture(scope="module")
def weka_sessions():
    names = ["0002", "0044", "0255", "0365", "0471", "0277"]
    require_shared(*(f"traces/weka/trace_{n}.json" for n in names))
    files = [WEKA / f"trace_{n}.json" for n in names]
    from replay.trace.importers import import_trace

    return import_trace("weka", [str(f) for f in files])


@pytest.mark.slow
@pytest.mark.parametrize("host_gib", [0.0, 2.0, 8.0, 16.0])
def test_weka_sessions_pool_4(weka_sessions, host_gib, tmp_path):
    # six Claude Code sessions (one with sub-agents), 177 calls, prompts up to ~130K tokens
    _sim_then_predict(weka_sessions, 4, 4.0, host_gib, tmp_path)
