"""The simulator's per-call records for fixed seeds, against a stored fixture.

The fixture was written by the simulator before its hot paths were optimised; any speed-up must
leave every record (times to the last bit, hits, restores) and every counter as they were.
Regenerate only on purpose, for a change meant to alter results:
`python -m tests.test_sim_records_fixed` (from the repository root).
"""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

import orjson
import pytest

from replay.clock import VirtualTimeLoop
from replay.driver.options import RunOptions
from replay.driver.pool import replay
from replay.sim.options import SimConfig
from replay.sim.transport import SimTransport
from replay.trace.synth import synth

FIXTURES = Path(__file__).parent / "fixtures" / "sim_records"

# Small device and host tiers, so that points evict, restore, write back and preempt; jitter, so
# that the engine's random draws are covered too.
CASES = {
    "block_write_through": dict(
        device_kv_gib=0.1, host_tier_gib=0.2, jitter=0.1, seed=7, max_num_batched_tokens=4096
    ),
    "session_conditioned": dict(
        device_kv_gib=0.08, host_tier_gib=0.1, device_eviction="session", admission="conditioned"
    ),
    "no_host_tier": dict(device_kv_gib=0.08, host_tier_gib=0.0, max_num_seqs=4),
}


def _run(case: str) -> dict:
    trace = synth(
        "swe-agent", tasks=24, seed=3, scale=0.2, max_calls_per_task=30, max_prompt_tokens=3000
    )
    cfg = SimConfig(hardware="h20", model="qwen3-coder-30b-a3b", tp=8, **CASES[case])
    sim = SimTransport(cfg, vocab_size=trace.header.vocab_size)
    loop = VirtualTimeLoop()
    try:
        res = loop.run_until_complete(replay(trace, sim, RunOptions(pool=8, forcing=True)))
    finally:
        loop.close()
    rows = sorted(res.rows, key=lambda r: (r["task"], r["call"]))
    return {"status": str(res.status), "rows": rows, "counters": sim.counters()}


def _path(case: str) -> Path:
    return FIXTURES / f"{case}.json.gz"


@pytest.mark.parametrize("case", sorted(CASES))
def test_records_match_the_stored_fixture(case):
    want = orjson.loads(gzip.decompress(_path(case).read_bytes()))
    got = orjson.loads(orjson.dumps(_run(case), option=orjson.OPT_SERIALIZE_NUMPY))
    assert got["status"] == want["status"] == "ok"
    assert len(got["rows"]) == len(want["rows"]) > 100
    for g, w in zip(got["rows"], want["rows"], strict=True):
        assert g == w, (g["task"], g["call"])
    assert got["counters"] == want["counters"]


def _write() -> None:
    FIXTURES.mkdir(parents=True, exist_ok=True)
    for case in sorted(CASES):
        data = orjson.dumps(_run(case), option=orjson.OPT_SERIALIZE_NUMPY)
        _path(case).write_bytes(gzip.compress(data, mtime=0))
        print(f"wrote {_path(case)}: {len(data)} bytes")


if __name__ == "__main__":
    _write()
    sys.exit(0)
