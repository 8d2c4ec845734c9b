"""`replay trace slice|merge|scale`: kept prompts are the original tokens, dependencies stay valid,
and the commands run as a user runs them (subprocess, exit codes, one-line errors)."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pytest

from replay.errors import ConfigError
from replay.trace.io import read_trace, write_trace
from replay.trace.model import Trace
from replay.trace.slicing import merge_traces, slice_trace
from replay.trace.synth import synth
from tests.test_trace_scale import SHARED, needs_shared


@functools.cache
def _agents() -> Trace:
    """A trace whose root tasks spawn sub-agents that join back (parent and after links)."""
    for seed in range(50):
        tr = synth("claude-code", tasks=4, seed=seed, scale=0.02, vocab_size=512)
        if sum(1 for cs in tr.tasks.values() if cs[0].parent is not None) >= 2:
            return tr
    raise AssertionError("no seed gives sub-agents")


def _round_trip(trace: Trace, tmp_path: Path) -> Trace:
    """Write and read back: the reader validates keep, indices, parents, joins and cycles."""
    write_trace(trace, tmp_path / "t.jsonl.gz")
    return read_trace(tmp_path / "t.jsonl.gz")


def _same_tokens(orig: Trace, new: Trace, shift: int = 0) -> None:
    """Every call of `new` sends the prompt (and output) its original call sent."""
    for t in new.tasks:
        for step in new.steps(t):
            c = step.call
            src = orig.call((c.task, c.index + shift))
            assert np.array_equal(step.prompt, orig.prompt(src)), c.ref
            assert np.array_equal(step.output, orig.output_ids(src)), c.ref


def test_slice_first_tasks_keeps_their_subagents_and_prompts(tmp_path):
    trace = _agents()
    roots = trace.root_task_ids
    sub_of_first = [
        t for t, cs in trace.tasks.items() if cs[0].parent and cs[0].parent[0] == roots[0]
    ]
    cut = _round_trip(slice_trace(trace, tasks=1), tmp_path)
    assert cut.root_task_ids == roots[:1]
    assert set(cut.tasks) == {roots[0], *sub_of_first}
    _same_tokens(trace, cut)
    for c in cut.calls:
        assert c.after == trace.call(c.ref).after  # whole tasks kept: every join kept


def test_slice_a_subagent_alone_reroots_it(tmp_path):
    trace = _agents()
    sub = next(t for t, cs in trace.tasks.items() if cs[0].parent is not None)
    cut = _round_trip(slice_trace(trace, task_ids=[sub]), tmp_path)
    assert cut.root_task_ids == [sub] and cut.tasks[sub][0].parent is None
    _same_tokens(trace, cut)


@pytest.mark.parametrize("start, stop", [(1, 40), (20, 40), (2, 5)])
def test_slice_window_renumbers_drops_orphans_and_keeps_tokens(tmp_path, start, stop):
    trace = _agents()
    cut = _round_trip(slice_trace(trace, start=start, stop=stop), tmp_path)
    kept = {c.ref for c in cut.calls}
    for t, cs in cut.tasks.items():
        assert [c.index for c in cs] == list(range(len(cs))) and len(cs) <= stop - start
        assert cs[0].keep == 0  # the first call of the window sends its whole prompt
        spawn = trace.tasks[t][0].parent
        if spawn is not None:  # spawned by a call inside the window, which is still its parent
            assert cs[0].parent == (spawn[0], spawn[1] - start)
            assert start <= spawn[1] < stop
    for c in cut.calls:
        assert all(r in kept for r in c.after)
    # a sub-agent spawned by a call outside the window is gone
    subs = {t: cs[0].parent for t, cs in trace.tasks.items() if cs[0].parent is not None}
    orphans = {t for t, spawn in subs.items() if not start <= spawn[1] < stop}
    assert bool(orphans) == (start != 1) and not orphans & set(cut.tasks)
    assert any(t in cut.tasks for t in subs) == (start == 1)  # sub-agents with >1 call survive
    _same_tokens(trace, cut, shift=start)


def test_slice_max_calls_is_a_window_from_zero(tmp_path):
    trace = _agents()
    a = slice_trace(trace, stop=3)
    _round_trip(a, tmp_path)
    assert all(len(cs) <= 3 for cs in a.tasks.values())
    assert all(c.keep == trace.call(c.ref).keep for c in a.calls)
    _same_tokens(trace, a)


@needs_shared
def test_slice_window_of_a_weka_block_trace(tmp_path):
    from replay.trace.importers import import_trace

    trace = import_trace("weka", [str(SHARED / "weka" / "trace_0291.json")], vocab_size=8192)
    cut = _round_trip(slice_trace(trace, start=3, stop=9), tmp_path)
    for t in cut.tasks:
        for step in cut.steps(t):
            c = step.call
            orig = trace.prompt(trace.call((c.task, c.index + 3)))
            n = len(orig) // 64 * 64  # hashed blocks; the unhashed tail is unique to each call
            assert np.array_equal(step.prompt[:n], orig[:n]) and len(step.prompt) == len(orig)


@pytest.mark.parametrize(
    "kw, field",
    [
        ({"tasks": 1, "task_ids": ["x"]}, "--tasks"),
        ({"tasks": 0}, "--tasks"),
        ({"task_ids": ["nope"]}, "--task-ids"),
        ({"start": 3, "stop": 3}, "--window-calls"),
        ({"start": 500}, None),
    ],
)
def test_slice_refuses_bad_selections(kw, field):
    with pytest.raises(ConfigError) as e:
        slice_trace(_agents(), **kw)
    assert e.value.field == field


def test_merge_renames_clashing_ids_and_keeps_tokens(tmp_path):
    a = _agents()
    b = synth("swe-agent", tasks=2, seed=9, scale=0.02, vocab_size=512)
    c = synth("swe-agent", tasks=2, seed=9, scale=0.02, vocab_size=512)  # same ids as b
    merged = _round_trip(merge_traces([a, b, c], ["a", "b", "b"]), tmp_path)
    assert len(merged) == len(a) + len(b) + len(c)
    assert len(merged.tasks) == len(a.tasks) + len(b.tasks) + len(c.tasks)
    assert merged.root_task_ids[: len(a.root_task_ids)] == a.root_task_ids
    renamed = [t for t in merged.tasks if t.startswith("b#3/")]
    assert len(renamed) == len(c.tasks)
    for t in renamed:
        orig = t.removeprefix("b#3/")
        for s_new, s_old in zip(merged.steps(t), c.steps(orig), strict=True):
            assert np.array_equal(s_new.prompt, s_old.prompt)
            assert np.array_equal(s_new.output, s_old.output)
    for t in a.tasks:  # no clash: ids, parents and joins as they were
        assert [(x.parent, x.after) for x in merged.tasks[t]] == [
            (x.parent, x.after) for x in a.tasks[t]
        ]


def test_merge_refuses_traces_of_different_vocabularies():
    a = synth("swe-agent", tasks=1, seed=1, scale=0.02, vocab_size=512)
    b = synth("swe-agent", tasks=1, seed=1, scale=0.02, vocab_size=1024)
    with pytest.raises(ConfigError, match="vocab_size"):
        merge_traces([a, b], ["a", "b"])


def test_merge_refuses_an_open_loop_trace_beside_a_closed_loop_one():
    """The merge was written, and every reader then refused it (a mix of arrival kinds)."""
    import dataclasses

    from replay.trace.model import Trace

    a = synth("swe-agent", tasks=1, seed=1, scale=0.02)
    b = synth("swe-agent", tasks=1, seed=2, scale=0.02)
    b = Trace(b.header, [dataclasses.replace(c, at_s=0.0 + c.index) for c in b.calls])
    with pytest.raises(ConfigError, match="b replay open loop .* a closed loop"):
        merge_traces([a, b], ["a", "b"])
    assert len(merge_traces([b, b], ["b", "b"])) == 2 * len(b)  # one kind: still merges
    with pytest.raises(ConfigError, match="x replay open loop .* x closed loop"):
        merge_traces([a, b], ["x", "x"])  # a/x.jsonl and b/x.jsonl: the same name, two kinds


# --- as a user runs them ------------------------------------------------------------------------


def _replay(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "replay.cli.main", "trace", *args],
        cwd=cwd, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_cli_scale_slice_merge_then_stats(tmp_path):
    src = tmp_path / "agents.jsonl.gz"
    write_trace(_agents(), src)
    r = _replay(
        "scale", str(src), "-o", "s.jsonl.gz", "--tokens", "1/8", "--time", "0.5", cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr
    before = orjson.loads(_replay("stats", str(src), "--json", cwd=tmp_path).stdout)
    after = orjson.loads(_replay("stats", "s.jsonl.gz", "--json", cwd=tmp_path).stdout)
    for k in ("calls", "tasks", "subagents"):
        assert after[k] == before[k]
    assert after["prompt_tokens"] == pytest.approx(before["prompt_tokens"] / 8, rel=0.02)
    assert abs(after["reuse_fraction"] - before["reuse_fraction"]) < 0.01
    assert after["gap_max_s"] == pytest.approx(before["gap_max_s"] * 0.5)

    r = _replay(
        "slice",
        "s.jsonl.gz",
        "-o",
        "cut.jsonl.gz",
        "--tasks",
        "2",
        "--window-calls",
        "0:4",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    r = _replay("merge", "cut.jsonl.gz", "s.jsonl.gz", "-o", "m.jsonl.gz", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert _replay("validate", "m.jsonl.gz", cwd=tmp_path).returncode == 0


@pytest.mark.parametrize(
    "args, says",
    [
        (["scale", "IN", "-o", "o.jsonl", "--tokens", "16"], "--tokens"),
        (["scale", "IN", "-o", "o.jsonl", "--tokens", "1/4", "--time", "-1"], "time"),
        (["slice", "IN", "-o", "o.jsonl", "--window", "a:b"], "--window"),
        (["slice", "IN", "-o", "o.jsonl", "--window", "5:2"], "0 <= START < END"),
        (["slice", "IN", "-o", "o.jsonl", "--window-calls", "1.5:3"], "--window-calls"),
        (
            ["slice", "IN", "-o", "o.jsonl", "--window-calls", "1:2", "--max-calls-per-task", "3"],
            "only one of",
        ),
        (["slice", "IN", "-o", "o.jsonl", "--window", "0:9", "--window-calls", "1:2"], "only one"),
        (["slice", "IN", "-o", "o.jsonl", "--window", "1e6:"], "nothing left"),
        (["scale", "missing.jsonl", "-o", "o.jsonl", "--tokens", "1/4"], "missing.jsonl"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, args, says):
    src = tmp_path / "IN"
    write_trace(synth("swe-agent", tasks=1, seed=1, scale=0.02, vocab_size=512), src)
    r = _replay(*args, cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = (r.stdout + r.stderr).strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in r.stderr
