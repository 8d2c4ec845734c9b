"""A multi-agent replay through the real llama.cpp server (the project's driver, closed loop):
exact prompt and completion lengths per call, per-call cached tokens adding up to the server's
counter, and the whole-prompt model explaining the run from its observed call times.

Marker `llamacpp`: deselected by `make test`, run by `make test-llamacpp`.
"""

from __future__ import annotations

import httpx
import pytest

from replay.driver.http import http_transport_factory
from replay.driver.options import RunOptions
from replay.driver.run import run_replay
from replay.engines.llamacpp import ADAPTER
from replay.metrics.parse import parse_metrics
from replay.model.wholeprompt import WholePromptConfig, simulate_timed
from tests.real.conftest_llamacpp import (
    BYTES_PER_TOKEN,
    OVERHEAD_BYTES,
    chain_trace,
    failed_calls,
    llamacpp_server,
    observed_events,
    read_calls,
)

pytestmark = pytest.mark.llamacpp

CACHE_RAM_MIB = 6


def test_multi_agent_replay_lengths_and_cached_tokens_add_up(tmp_path):
    # 5 agents x 4 calls on 2 slots; short gaps so calls overlap and queue on the server
    trace = chain_trace(agents=5, calls=4, first=400, append=120, out=12, seed=11, gap_s=0.15)
    options = RunOptions(pool=5, strict=True, request_extras=ADAPTER.request_extras)
    with llamacpp_server(
        tmp_path / "server", tmp_path / "model", cache_ram_mib=CACHE_RAM_MIB
    ) as url:
        before = ADAPTER.map_counters(parse_metrics(httpx.get(url + "/metrics").text))
        factory = http_transport_factory(url, trace, options)
        result = run_replay(trace, factory, options, tmp_path / "run", virtual=False)
        after = ADAPTER.map_counters(parse_metrics(httpx.get(url + "/metrics").text))

    calls = read_calls(tmp_path / "run")
    assert result["status"] == "ok", failed_calls(calls, tmp_path / "server" / "server.log")
    assert len(calls) == len(trace) and (calls["status"] == "ok").all()
    # lengths verified per call (strict mode would have failed the run otherwise)
    assert (calls["prompt_tokens_reported"] == calls["prompt_tokens"]).all()
    assert (calls["completion_tokens"] == calls["max_tokens"]).all()
    expected_prompt = {c.ref: c.prompt_len for c in trace.calls}
    assert all(
        r.prompt_tokens == expected_prompt[(r.task, r.call)] for r in calls.itertuples(index=False)
    )
    # per-call cached tokens summed == delta of llamacpp:prompt_tokens_cached_total
    delta = {k: after[k] - before[k] for k in ("cached_tokens", "prompt_tokens", "output_tokens")}
    assert int(calls["cached_tokens"].sum()) == delta["cached_tokens"]
    assert delta["prompt_tokens"] == trace.prompt_tokens
    assert delta["output_tokens"] == trace.output_tokens
    assert delta["cached_tokens"] > 0  # the RAM tier and the slots did serve reuse

    # The model replayed on the observed send/end times explains the run: its total reuse is
    # within 8% of the prompt tokens (sends and server admissions differ by milliseconds, which can
    # swap two calls that arrive together; the sequential per-call check is in test_llamacpp_server).
    cfg = WholePromptConfig(2, CACHE_RAM_MIB, BYTES_PER_TOKEN, OVERHEAD_BYTES, ctx_tokens=16384)
    model = simulate_timed(trace, observed_events(calls), cfg).totals
    assert abs(model.cached_tokens - delta["cached_tokens"]) <= 0.08 * trace.prompt_tokens
