"""The rules on their own: the events a driver feeds in and what becomes ready, worked by hand."""

from __future__ import annotations

import subprocess
import sys

from replay.trace.schedule import ClosedLoop, arrivals
from tests.servers import make_trace


def names(ready):
    return [(r.call.ref if r.call else ("free", r.slot), r.t_s) for r in ready]


def test_slots_gaps_sub_agents_joins_and_tail_gaps_by_hand():
    trace = make_trace(
        {
            "a": [{"gap": 1.0}, {"gap": 2.0, "after": [("a.s", 0)]}],
            "b": [{"gap": 0.5, "tail": 4.0}],
            "a.s": [{"gap": 0.25, "parent": ("a", 0)}],
            "c": [{}],
        }
    )
    rules = ClosedLoop(trace, 2)
    assert names(rules.start(10.0)) == [(("a", 0), 11.0), (("b", 0), 10.5)]
    # b ends: its slot frees after the tail gap (4 s), and only then takes c
    assert names(rules.ended(("b", 0), 10.5, 12.0)) == [(("free", 1), 16.0)]
    # a/0 ends: a/1 waits for the sub-agent it spawned (no slot taken), which starts now
    assert names(rules.ended(("a", 0), 11.0, 13.0)) == [(("a.s", 0), 13.25)]
    assert names(rules.ended(("a.s", 0), 13.25, 15.0)) == [(("a", 1), 17.0)]  # the join
    assert names(rules.free(1, 16.0)) == [(("c", 0), 16.0)]
    assert rules.outstanding == 2 and not rules.stuck
    assert names(rules.ended(("c", 0), 16.0, 16.5)) == []
    assert names(rules.ended(("a", 1), 17.0, 18.0)) == []
    assert rules.finished and not rules.stuck


def test_abort_skips_the_rest_of_the_task_and_its_sub_agents_but_frees_the_joins():
    trace = make_trace(
        {
            "p": [{}, {}, {"after": [("q", 0)]}],
            "p.s": [{"parent": ("p", 1)}],
            "q": [{"after": [("p.s", 0)]}],
        }
    )
    rules = ClosedLoop(trace, 2)
    assert names(rules.start(0.0)) == [(("p", 0), 0.0)]  # q waits on p.s, which waits on p/1
    assert rules.outstanding == 1
    # p/0 fails and aborts p: p/1, p/2 and the sub-agent p/1 would spawn are skipped; q goes on
    assert names(rules.ended(("p", 0), 0.0, 2.0, abort=True)) == [(("q", 0), 2.0)]
    assert names(rules.ended(("q", 0), 2.0, 3.0)) == []
    assert rules.finished


def test_timing_original_keeps_the_recorded_pace_but_never_before_the_dependency():
    trace = make_trace({"a": [{"start": 100.0}, {"gap": 9.0, "start": 103.0}]})
    rules = ClosedLoop(trace, 1, timing="original", gap_scale=2.0)
    rules.start(0.0)
    assert names(rules.ended(("a", 0), 0.5, 1.0)) == [(("a", 1), 6.5)]  # 0.5 + 3 s * 2


def test_open_loop_arrivals_count_from_the_first_one():
    trace = make_trace({"a": [{"at": 1e9 + 2.0}], "b": [{"at": 1e9}, {"at": 1e9 + 2.0}]})
    assert [(c.ref, t) for c, t in arrivals(trace, 0.5)] == [
        (("b", 0), 0.0),
        (("a", 0), 1.0),  # ties keep file order
        (("b", 1), 1.0),
    ]


def test_the_rules_are_pure():
    code = (
        "import sys; import replay.trace.schedule; "
        "bad = ('asyncio', 'httpx', 'aiohttp', 'replay.model', 'replay.driver', 'replay.sim'); "
        "print([m for m in bad if m in sys.modules])"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
