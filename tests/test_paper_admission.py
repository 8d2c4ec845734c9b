"""Write admission as the EfficientAgent release decides it, on hand-made lookup sequences:
once per request at its first lookup, u = floor(n/b) - floor(h/b) new chunks against kappa;
`conditioned` only under pressure; Proposition 1's reuse distances of declined chunks."""

from __future__ import annotations

import numpy as np
import pytest

from replay.sim.admission import (
    ConditionedAdmission,
    DeclineReuse,
    FixedAdmission,
    Telemetry,
    make_admission,
)
from replay.sim.engine import Seq, SimEngine
from replay.sim.options import SimConfig

B = 1024
FULL = Telemetry(fill_share=0.96, last_evict_at=0.0, at_s=0.0)


@pytest.mark.parametrize(
    ("n", "h", "u"),
    [
        (3 * B + 5, 0, 3),  # partial last chunk does not count
        (3 * B + 5, B, 2),  # one chunk already on the host
        (4 * B - 1, B - 1, 3),  # h below a chunk boundary holds no whole chunk
        (2 * B, 2 * B, 0),
    ],
)
def test_new_chunks_are_whole_prompt_chunks_minus_whole_held_chunks(n, h, u):
    assert FixedAdmission(kappa=8, chunk_tokens=B).new_chunks(n, h) == u


def test_fixed_declines_above_kappa_only():
    a = FixedAdmission(kappa=2, chunk_tokens=B)
    assert a.admit("t", 2 * B + 10, 0, 0.0, None)  # u = 2: admitted
    assert not a.admit("t", 3 * B, 0, 0.0, None)  # u = 3: declined
    assert a.admit("t", 3 * B, B, 0.0, None)  # the host holds one: u = 2


def _cond(capacity_bytes: int, kappa: int = 0) -> ConditionedAdmission:
    return ConditionedAdmission(
        kappa, B, window_s=60.0, bytes_per_token=1, capacity_bytes=capacity_bytes
    )


def test_conditioned_estimate_uses_distinct_tasks_in_window_and_mean_prompt():
    a = _cond(capacity_bytes=10**9)
    for i, task in enumerate(["a", "b", "a", "c"]):
        a.admit(task, 1000 * (i + 1), 0, float(i), FULL)
    # A = 3 tasks, N̄ = (1000 + 2000 + 3000 + 4000) / 4 = 2500, β = 1
    assert a.working_set_bytes(3.0) == 2 * 2500
    # at 62.5 s a and b (last seen at 2 s and 1 s) left the 60 s window: A = 1 (c)
    assert a.working_set_bytes(62.5) == 0
    a.admit("d", 1000, 0, 62.5, FULL)
    # A = 2 (c, d); N̄ is not windowed in time: the mean of all five first lookups
    assert a.working_set_bytes(62.5) == 1 * (1000 + 2000 + 3000 + 4000 + 1000) / 5
    assert a.working_set_bytes(63.5) == 0  # c left too


def test_conditioned_mean_prompt_covers_the_last_256_first_lookups():
    a = _cond(capacity_bytes=10**9)
    for i in range(300):
        a.admit(f"t{i % 2}", 10 if i < 44 else 1000, 0, 0.0, FULL)
    # the 44 short prompts fell out of the last 256: N̄ = 1000, A = 2
    assert a.working_set_bytes(0.0) == 1000


def test_conditioned_fires_only_on_all_three_conditions():
    a = _cond(capacity_bytes=5000)
    assert a.admit("a", 4 * B, 0, 0.0, FULL)  # A = 1: estimate 0, not over
    assert a.admit("b", 4 * B, 0, 1.0, FULL)  # A = 2: 4096 <= 5000
    # A = 3, N̄ = 4096: estimate 8192 > 5000, tier full, evicted 2 s ago: declined
    assert not a.admit("c", 4 * B, 0, 2.0, FULL)
    not_full = Telemetry(0.94, 0.0, 2.0)
    assert a.admit("c", 4 * B, 0, 2.0, not_full)
    no_recent_evict = Telemetry(0.99, None, 2.0)
    assert a.admit("c", 4 * B, 0, 2.0, no_recent_evict)
    old_evict = Telemetry(0.99, -59.0, 2.0)  # 61 s before now
    assert a.admit("c", 4 * B, 0, 2.0, old_evict)
    assert a.admit("c", 0, 0, 2.0, FULL)  # u = 0 <= kappa: admitted whatever the pressure


def test_stale_telemetry_falls_back_to_the_estimate_alone():
    a = _cond(capacity_bytes=3000)
    for t, task in enumerate("abc"):
        a.admit(task, 4 * B, 0, float(t), None)
    stale_not_full = Telemetry(0.10, None, at_s=-4.0)  # 6 s old
    assert not a.admit("d", 4 * B, 0, 2.0, stale_not_full)
    fresh_not_full = Telemetry(0.10, None, at_s=-2.0)  # 4 s old: still trusted
    assert a.admit("d", 4 * B, 0, 2.0, fresh_not_full)
    big = _cond(capacity_bytes=10**9)
    assert big.admit("a", 4 * B, 0, 0.0, None)  # estimate under the tier: admitted


def test_decline_reuse_distances_by_hand():
    d = DeclineReuse(capacity_chunks=2)
    d.reference(np.array([0, 1]))
    d.declined(np.array([0, 1]))
    d.reference(np.array([2]))  # one distinct chunk since the decline
    d.reference(np.array([0]))  # 0: distance 1 (chunk 2; 1 came before the decline): within
    d.reference(np.array([1]))  # 1: distance 2 (2 and 0): >= capacity, beyond
    assert (d.within, d.beyond, d.never) == (1, 1, 0)
    d.declined(np.array([1]))
    d.reference(np.array([1]))  # nothing referenced in between: within
    d.declined(np.array([2]))  # never referenced again
    assert (d.within, d.beyond, d.never) == (2, 1, 1)
    d2 = DeclineReuse(capacity_chunks=3)
    d2.reference(np.array([5, 6, 7]))
    d2.declined(np.array([7]))
    d2.reference(np.array([5, 6]))  # 2 distinct others < 3: within
    d2.reference(np.array([7]))
    assert (d2.within, d2.beyond) == (1, 0)


def test_decline_reuse_counts_from_the_decline_not_the_lookup():
    """Chunks other requests looked up while the declining one prefilled were not above it: a
    write at the decline would have made it the newest (docs/paper.md, Proposition 1: "between its
    decline and its next lookup"); they used to count, calling it evicted anyway."""
    d = DeclineReuse(capacity_chunks=2)
    d.reference(np.array([0]))  # the declining request's lookup
    d.reference(np.array([3, 4]))  # two other requests' lookups during its prefill
    d.declined(np.array([0]))
    d.reference(np.array([0]))  # nothing since the decline: within
    assert (d.within, d.beyond, d.never) == (1, 0, 0)
    d.reference(np.array([5]))  # two requests look 5 up, then both decline it
    d.declined(np.array([5]))
    d.declined(np.array([5]))
    d.reference(np.array([6, 7]))
    d.reference(np.array([5]))  # one chunk, one distance: 2, beyond
    assert (d.within, d.beyond, d.never) == (1, 1, 0)


def _engine(admission: str, kappa: int, host_gib: float) -> SimEngine:
    cfg = SimConfig(
        device_kv_gib=0.5, host_tier_gib=host_gib, chunk_tokens=B, admission=admission, kappa=kappa
    )
    return SimEngine(cfg, debug=True)


def test_engine_decides_once_at_the_first_lookup():
    eng = _engine("fixed", kappa=1, host_gib=1.0)
    assert isinstance(eng.admission, FixedAdmission)
    keys = np.arange((3 * B) // 16, dtype=np.int64)
    s = Seq(task="a", prompt_len=3 * B, output_len=1, keys=keys)
    s.prefill_len = s.prompt_len
    h = eng.host
    assert h is not None
    assert eng._admit(s, 0.0)
    assert s.write_ok is False  # u = 3 > kappa 1, decided before prefill
    eng._prefill_done(s, 1.0)
    assert eng.c["declined_writes"] == 3 and h.chunks_written == 0
    assert isinstance(
        make_admission(SimConfig(admission="all")).admit("a", 10**6, 0, 0, None), bool
    )
