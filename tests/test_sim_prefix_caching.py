"""Simulator without device prefix caching (vLLM's --no-enable-prefix-caching): no device block
is shared or kept, so every call computes its whole prompt unless the host tier restores it."""

from __future__ import annotations

import dataclasses

import click
import pytest
from click.testing import CliRunner

from replay.cli.sim_options import sim_options
from replay.errors import ConfigError
from replay.sim.options import SimConfig
from replay.trace.synth import synth
from tests.sim_helpers import closed_loop

SMALL = SimConfig(device_kv_gib=0.08, chunk_tokens=64)
OFF = dataclasses.replace(SMALL, enable_prefix_caching=False)


@pytest.fixture(scope="module")
def small_trace():
    return synth("swe-agent", tasks=8, seed=5, scale=0.05, max_calls_per_task=8)


def test_without_prefix_caching_every_prompt_token_is_computed(small_trace):
    on, _, t_on = closed_loop(small_trace, SMALL, 4)
    off, rows, t_off = closed_loop(small_trace, OFF, 4)  # debug=True: invariants every step
    assert on["device_hit_tokens"] > 0  # the trace does reuse prefixes
    assert off["device_hit_tokens"] == 0 and off["host_restore_tokens"] == 0
    assert off["computed_prefill_tokens"] == off["prompt_tokens"] == small_trace.prompt_tokens
    assert off["output_tokens"] == small_trace.output_tokens
    assert all(r["cached"] == 0 for r in rows)
    assert t_off > t_on  # the same calls, more tokens to compute


def test_without_prefix_caching_the_host_tier_still_restores(small_trace):
    tier = dataclasses.replace(OFF, host_tier_gib=1)
    c, rows, _ = closed_loop(small_trace, tier, 4)
    assert c["device_hit_tokens"] == 0
    assert c["host_restore_tokens"] > 0
    assert c["host_restore_tokens"] + c["computed_prefill_tokens"] == c["prompt_tokens"]
    assert sum(r["by_source"]["host"] for r in rows) == c["host_restore_tokens"]


@pytest.mark.parametrize("kw", [{"personality": "llamacpp"}, {"write_policy": "write-back"}])
def test_prefix_caching_off_is_refused_where_it_has_no_meaning(kw):
    with pytest.raises(ConfigError, match="--enable-prefix-caching"):
        SimConfig(enable_prefix_caching=False, **kw)


def test_the_flag_is_vllms():
    seen = {}

    @click.command()
    @sim_options
    def cmd(**kw):
        seen["cfg"] = SimConfig.from_options(**kw)

    assert CliRunner().invoke(cmd, []).exit_code == 0
    assert seen["cfg"].enable_prefix_caching is True
    r = CliRunner().invoke(cmd, ["--no-enable-prefix-caching"])
    assert r.exit_code == 0, r.output
    assert seen["cfg"].enable_prefix_caching is False
