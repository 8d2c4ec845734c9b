"""The engine runner on the virtual-time loop: a failing engine fails its requests, and the
runner stops and starts again."""

from __future__ import annotations

import asyncio

import pytest

from replay.clock import run_virtual
from replay.errors import RequestFailed
from replay.protocol import CompletionRequest
from replay.sim.options import SimConfig
from replay.sim.transport import SimTransport
from tests.sim_helpers import tokens

CFG = SimConfig(hardware="h20", model="qwen3-coder-30b-a3b", tp=8, device_kv_gib=0.1)


def test_an_engine_error_fails_every_request_in_flight_and_close_reraises_it():
    async def main():
        sim = SimTransport(CFG)
        await sim.start()

        def broken_commit(plan, steps, t_end):
            raise ValueError("broken step")

        sim.engine.commit = broken_commit  # type: ignore[method-assign]
        reqs = [CompletionRequest(f"t{i}", 0, tokens(i, 300), 20) for i in range(3)]
        results = await asyncio.gather(*(sim.complete(r) for r in reqs), return_exceptions=True)
        with pytest.raises(RuntimeError, match="simulator engine failed"):
            await sim.complete(CompletionRequest("late", 0, tokens(9, 300), 20))
        with pytest.raises(ValueError, match="broken step"):
            await sim.close()
        return results

    results = run_virtual(main)
    assert all(isinstance(r, RequestFailed) for r in results)
    assert all(r.status == 500 and "broken step" in str(r) for r in results)


def test_the_runner_restarts_after_close_and_keeps_simulated_time():
    async def main():
        sim = SimTransport(CFG)
        r0 = await sim.complete(CompletionRequest("a", 0, tokens(1, 500), 30))
        await sim.close()
        t_closed = asyncio.get_running_loop().time()
        r1 = await sim.complete(CompletionRequest("b", 0, tokens(2, 500), 30))
        await sim.close()
        return r0, r1, t_closed, sim.counters()

    r0, r1, t_closed, c = run_virtual(main)
    assert 0 < r0.t_first_token < r0.t_end <= t_closed < r1.t_first_token < r1.t_end
    # the same work from an idle engine takes the same simulated time
    assert r1.t_end - t_closed == pytest.approx(r0.t_end, rel=1e-9)
    assert c["requests"] == 2 and c["output_tokens"] == 60


@pytest.mark.parametrize(
    "config",
    [
        dict(device_kv_gib=0.08, host_tier_gib=0.1, jitter=0.1, seed=3),
        dict(device_kv_gib=0.08, host_tier_gib=0.1, admission="ttl", ttl_s=2.0),
        dict(device_kv_gib=0.1, host_tier_gib=0.2, blocking_transfers=True, max_num_seqs=3),
    ],
)
def test_waits_ended_in_place_give_the_records_of_waits_through_the_loop(config, monkeypatch):
    """The engine's waits that nothing can interrupt end without a loop turn
    (`VirtualTimeLoop.advance_if_alone`); every record and counter is what waiting out each of
    them through a timer gives."""
    from replay.clock import VirtualTimeLoop
    from replay.driver.options import RunOptions
    from replay.driver.pool import replay
    from replay.trace.synth import synth

    trace = synth("swe-agent", tasks=12, seed=5, scale=0.2, max_calls_per_task=12)
    cfg = SimConfig(hardware="h20", model="qwen3-coder-30b-a3b", tp=8, **config)
    ended_in_place = []

    def run() -> tuple[list, dict]:
        sim = SimTransport(cfg, vocab_size=trace.header.vocab_size)
        res = run_virtual(lambda: replay(trace, sim, RunOptions(pool=6, forcing=True)))
        return res.rows, sim.counters()

    alone = VirtualTimeLoop.advance_if_alone

    def counting(loop, delay):
        ok = alone(loop, delay)
        ended_in_place.append(ok)
        return ok

    monkeypatch.setattr(VirtualTimeLoop, "advance_if_alone", counting)
    in_place = run()
    monkeypatch.setattr(VirtualTimeLoop, "advance_if_alone", lambda loop, delay: False)
    through_loop = run()
    assert any(ended_in_place) and not all(ended_in_place)
    assert in_place == through_loop
