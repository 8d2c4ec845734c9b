"""`slice_trace(window_s=...)` and `replay trace slice --window`: a time window in seconds on the
trace's own timeline, property-tested against oracles written from the definitions.

Oracles:
- the timeline: a closed-loop call is sent at max(end of its dependencies) + its gap, where calls
  take no time and every root task has its own slot (so a root task's first call is at its gap);
  solved here by relaxation, independently of the scheduler; open loop: arrival - first arrival;
- the window: exactly the calls of the kept tasks with a time in [START, END) stay, each sending
  the tokens it sent before, and the sliced trace's own timeline is the original's minus the
  first kept call's time; joins and parents point only at kept calls (re-rooted otherwise).
"""

from __future__ import annotations

import functools
import math
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from replay.errors import ConfigError
from replay.trace.io import read_trace, write_trace
from replay.trace.model import CallRef, Trace
from replay.trace.slicing import slice_trace, timeline_s
from replay.trace.synth import synth
from tests.shared_data import SHARED


def _oracle_times_s(trace: Trace) -> dict[CallRef, float]:
    """Send times by relaxation: repeat t(c) = max(t(deps)) + gap until nothing changes."""
    if all(c.at_s is not None for c in trace.calls):
        first = min(float(c.at_s or 0.0) for c in trace.calls)
        return {c.ref: float(c.at_s or 0.0) - first for c in trace.calls}
    t = {c.ref: 0.0 for c in trace.calls}
    for _ in range(len(trace.calls) + 1):
        changed = False
        for c in trace.calls:
            deps = [*c.after, *([(c.task, c.index - 1)] if c.index else [])]
            deps += [c.parent] if c.index == 0 and c.parent is not None else []
            now = max((t[d] for d in deps), default=0.0) + c.gap_s
            changed |= now != t[c.ref]
            t[c.ref] = now
        if not changed:
            return t
    raise AssertionError("no fixed point: a dependency cycle")


@functools.cache
def _agents(seed: int) -> Trace:
    """A small claude-code trace, with sub-agents that join back for most seeds."""
    return synth("claude-code", tasks=3, seed=seed, scale=0.02, vocab_size=512)


def _open_loop(trace: Trace) -> Trace:
    """The same trace as an open-loop one: arrivals at epoch seconds plus its closed-loop times
    (the dependencies dropped: each call is sent at its time)."""
    t = _oracle_times_s(trace)
    calls = [replace(c, at_s=1.7e9 + t[c.ref], after=(), parent=None) for c in trace.calls]
    return Trace(trace.header, calls)


def _round_trip(trace: Trace, tmp_path) -> Trace:
    """Write and read back: the reader validates keep, indices, parents, joins and cycles."""
    write_trace(trace, tmp_path / "cut.jsonl.gz")
    return read_trace(tmp_path / "cut.jsonl.gz")


def assert_window(orig: Trace, cut: Trace, lo_s: float, hi_s: float, tasks: set[str]) -> None:
    """`cut` is `orig`'s window [lo_s, hi_s) over `tasks` (and their sub-agents), per the oracles."""
    t = _oracle_times_s(orig)
    want = {c.ref for c in orig.calls if c.task in tasks and lo_s <= t[c.ref] < hi_s}
    first = {task: min(i for tk, i in want if tk == task) for task, _ in want}
    assert set(cut.tasks) == set(first)
    back = {(c.task, c.index): (c.task, c.index + first[c.task]) for c in cut.calls}
    assert set(back.values()) == want
    block = orig.header.block_size if orig.header.tokens == "blocks" else None
    for task in cut.tasks:
        for step in cut.steps(task):
            src = orig.call(back[step.call.ref])
            prompt = orig.prompt(src)
            assert len(step.prompt) == len(prompt), src.ref
            if block:  # hashed blocks; the unhashed tail is unique to each call
                n = len(prompt) // block * block
                assert np.array_equal(step.prompt[:n], prompt[:n]), src.ref
            else:
                assert np.array_equal(step.prompt, prompt), src.ref
                assert np.array_equal(step.output, orig.output_ids(src)), src.ref
    t0 = min(t[r] for r in want)
    t_cut = _oracle_times_s(cut)
    for new, old in back.items():
        assert t_cut[new] == pytest.approx(t[old] - t0, abs=1e-6), (old, t[old], t0)
        c, src = cut.call(new), orig.call(old)
        assert [back[r] for r in c.after] == [r for r in src.after if r in want]
        spawn = orig.tasks[old[0]][0].parent
        if c.index == 0:
            assert (c.parent is not None) == (spawn in want), old  # else re-rooted
        if c.parent is not None:
            assert back[c.parent] == spawn
        assert c.at_s == src.at_s
    assert timeline_s(cut) == pytest.approx(t_cut, abs=1e-6)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 30),
    open_loop=st.booleans(),
    lo=st.floats(0, 1),
    width=st.floats(0.01, 1.2),
    on_call_times=st.booleans(),
    one_task=st.booleans(),
)
@example(seed=0, open_loop=False, lo=1.0, width=1.0, on_call_times=True, one_task=False)
def test_time_window_keeps_exactly_the_calls_in_it(
    tmp_path_factory, seed, open_loop, lo, width, on_call_times, one_task
):
    orig = _agents(seed)
    if open_loop:
        orig = _open_loop(orig)
    t = _oracle_times_s(orig)
    assert timeline_s(orig) == pytest.approx(t, abs=1e-6)
    span_s = max(t.values())
    lo_s, hi_s = lo * span_s, (lo + width) * span_s
    if on_call_times:  # both ends exactly on calls' times: START is kept, END is not
        times = sorted(set(t.values()))
        lo_s, hi_s = times[int(lo * (len(times) - 1))], times[-1] if width > 1 else times[-2]
        hi_s = max(hi_s, times[min(len(times) - 1, times.index(lo_s) + 1)])
        if hi_s <= lo_s:  # START on the last call's time: END past it keeps just that call
            hi_s = lo_s + 1.0
    root = orig.root_task_ids[seed % len(orig.root_task_ids)]
    tasks = {root, *(x for x, cs in orig.tasks.items() if cs[0].parent and cs[0].parent[0] == root)}
    kw = {"task_ids": [root]} if one_task else {}
    if not any(lo_s <= t[c.ref] < hi_s for c in orig.calls if not one_task or c.task in tasks):
        with pytest.raises(ConfigError, match="nothing left"):
            slice_trace(orig, window_s=(lo_s, hi_s), **kw)
        return
    cut = _round_trip(slice_trace(orig, window_s=(lo_s, hi_s), **kw), tmp_path_factory.mktemp("w"))
    assert_window(orig, cut, lo_s, hi_s, tasks if one_task else set(orig.tasks))


def test_a_subagent_spawned_before_the_window_is_rerooted_and_keeps_its_place(tmp_path):
    orig = next(
        tr for tr in map(_agents, range(50)) if any(cs[0].parent for cs in tr.tasks.values())
    )
    t = _oracle_times_s(orig)
    sub = next(x for x, cs in orig.tasks.items() if cs[0].parent and len(cs) >= 2)
    lo_s = t[(sub, 1)]  # after the spawn and the sub-agent's first call
    cut = _round_trip(slice_trace(orig, window_s=(lo_s, None)), tmp_path)
    assert cut.tasks[sub][0].parent is None and sub in cut.root_task_ids
    assert cut.tasks[sub][0].keep == 0  # nothing earlier is left: it sends its whole prompt
    assert_window(orig, cut, lo_s, math.inf, set(orig.tasks))


def test_window_bounds_are_checked():
    orig = _agents(1)
    for bad in [(-1.0, 2.0), (3.0, 3.0), (0.0, math.nan)]:
        with pytest.raises(ConfigError) as e:
            slice_trace(orig, window_s=bad)
        assert e.value.field == "--window"
    with pytest.raises(ConfigError, match="not both"):
        slice_trace(orig, window_s=(0.0, 5.0), start=1)


@pytest.mark.shared("traces/weka/trace_0277.json")
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lo=st.floats(0, 0.9), width=st.floats(0.05, 0.5))
def test_time_window_of_a_real_weka_trace(tmp_path_factory, lo, width):
    orig = _weka()
    span_s = max(_oracle_times_s(orig).values())
    lo_s, hi_s = lo * span_s, (lo + width) * span_s
    try:
        cut = slice_trace(orig, window_s=(lo_s, hi_s))
    except ConfigError as e:
        assert "nothing left" in str(e)  # a stretch where no call starts (a long think time)
        return
    assert_window(orig, _round_trip(cut, tmp_path_factory.mktemp("w")), lo_s, hi_s, set(orig.tasks))


@functools.cache
def _weka() -> Trace:
    from replay.trace.importers import import_trace

    return import_trace("weka", [str(SHARED / "traces/weka/trace_0277.json")], vocab_size=8192)


# --- as a user runs it --------------------------------------------------------------------------


def _replay(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "replay.cli.main", "trace", *args],
        cwd=cwd, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_cli_window_counts_seconds_and_window_calls_counts_indices(tmp_path):
    orig = _agents(2)
    write_trace(orig, tmp_path / "in.jsonl.gz")
    t = _oracle_times_s(orig)
    hi_s = sorted(t.values())[len(t) // 2]
    r = _replay("slice", "in.jsonl.gz", "-o", "s.jsonl.gz", "--window", f":{hi_s}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert_window(orig, read_trace(tmp_path / "s.jsonl.gz"), 0.0, hi_s, set(orig.tasks))
    r = _replay("slice", "in.jsonl.gz", "-o", "c.jsonl.gz", "--window-calls", "1:3", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    by_calls = read_trace(tmp_path / "c.jsonl.gz")

    def shape(tr: Trace) -> list:
        return [(c.task, c.index, c.prompt_len, c.keep, c.parent, c.after) for c in tr.calls]

    assert shape(by_calls) == shape(slice_trace(orig, start=1, stop=3))
    assert all(len(cs) <= 2 for cs in by_calls.tasks.values())


@pytest.mark.shared("traces/weka")
def test_a_block_trace_window_keeps_each_calls_blocks_and_output(tmp_path):
    """Slicing renumbers a windowed task's calls, and a block trace's stand-in outputs are keyed
    by the index: they were drawn anew. Now they are written out, as for token-id traces; the
    blocks (the prefix reuse) were kept before and are now too."""
    from replay.trace.importers import import_trace
    from replay.trace.slicing import slice_trace
    from tests.shared_data import SHARED

    weka = sorted((SHARED / "traces" / "weka").glob("*.json"))[:2]
    trace = import_trace("weka", weka)
    cut = slice_trace(trace, start=2, stop=6)
    for task in cut.task_ids:
        was = list(trace.steps(task))[2:6]
        now = list(cut.steps(task))
        assert len(now) == len(was)
        for a, b in zip(was, now, strict=True):
            assert np.array_equal(a.output, b.output)
            assert a.call.prompt_len == b.call.prompt_len
            bs = trace.header.block_size
            full = a.call.prompt_len // bs * bs
            assert np.array_equal(a.prompt[:full], b.prompt[:full])  # every full block
