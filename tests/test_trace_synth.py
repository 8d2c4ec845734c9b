"""Synthetic generator: presets match their published statistics; seeds and knobs behave."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from replay.errors import ConfigError
from replay.trace.io import read_trace, write_trace
from replay.trace.stats import trace_stats
from replay.trace.synth import PRESETS, synth


@pytest.fixture(scope="module")
def swe():
    return synth("swe-agent")


@pytest.fixture(scope="module")
def claude():
    return synth("claude-code")


def test_swe_agent_default_is_paper_scale(swe) -> None:
    # EfficientAgent study: 4,427 calls, 147M prompt tokens, mean prompt ~33K, contexts from a few
    # K up to ~238K, 97-98% of a prompt processed in the task's previous call.
    s = trace_stats(swe)
    assert 4427 * 0.95 <= s.calls <= 4427 * 1.05
    assert 147e6 * 0.9 <= s.prompt_tokens <= 147e6 * 1.1
    assert 33_000 * 0.9 <= s.prompt_len_mean <= 33_000 * 1.1
    assert s.prompt_len_max <= 238_000
    assert 0.97 <= s.reuse_fraction <= 0.98
    firsts = [cs[0].prompt_len for cs in swe.tasks.values()]
    assert min(firsts) >= 2_000 and np.median(firsts) < 10_000  # a few K to start
    # the agent's own time between calls: the study's median turn (9.0 s) is ~14x it
    assert 0.5 <= s.gap_p50_s <= 0.8 and s.gap_p90_s <= 5.0
    for cs in swe.tasks.values():  # contexts grow within a task, except where an edit elides
        assert all(
            b.prompt_len > a.prompt_len or b.keep < a.prompt_len + a.output_len
            for a, b in zip(cs, cs[1:], strict=False)
        )
    # Delta encoding: stored tokens are a few percent of the expanded prompts.
    assert s.unique_tokens < 0.04 * s.prompt_tokens


def test_swe_agent_context_edits_elide_an_old_tool_result(swe) -> None:
    # A context edit (the study's definition: the next prompt diverges inside the current one)
    # keeps the context up to the tool result appended five calls earlier and sends the rest
    # again; it is rare (0.7% of calls) and sets the share of new KV reused by the next call.
    from replay.studies.efficientagent.page import reappearing_fraction

    p = PRESETS["swe-agent"]
    edits = 0
    for cs in swe.tasks.values():
        for i in range(1, len(cs)):
            a, b = cs[i - 1], cs[i]
            assert len(b.append) == b.prompt_len - b.keep
            if b.keep == a.prompt_len + a.output_len:
                continue
            edits += 1
            assert i > p.edit_back_turns and b.keep < a.prompt_len
            assert b.keep >= cs[i - p.edit_back_turns - 1].prompt_len  # not before that call
    calls = sum(len(cs) - 1 for cs in swe.tasks.values())
    assert 0.003 * calls <= edits <= 0.012 * calls, edits
    assert reappearing_fraction(swe) == pytest.approx(0.973, abs=0.003)


def test_edits_draw_from_their_own_stream(monkeypatch) -> None:
    # Edits change kept prefixes only: call counts, outputs and gaps are the same draws.
    import dataclasses
    import importlib

    synth_mod = importlib.import_module("replay.trace.synth")  # the module, not the function

    def draw(prob: float):
        preset = dataclasses.replace(PRESETS["swe-agent"], edit_prob=prob)
        monkeypatch.setitem(synth_mod.PRESETS, "swe-agent", preset)
        return synth("swe-agent", tasks=6, seed=3, max_calls_per_task=40)

    plain, edited = draw(0.0), draw(0.2)
    assert [(c.task, c.output_len, c.gap_s) for c in plain.calls] == [
        (c.task, c.output_len, c.gap_s) for c in edited.calls
    ]
    assert all(c.index == 0 or len(c.append) < 40_000 for c in plain.calls)
    shrunk = sum(
        x.prompt_len < y.prompt_len for x, y in zip(edited.calls, plain.calls, strict=True)
    )
    assert shrunk > 0 and edited.calls[0].keep == plain.calls[0].keep == 0


def test_claude_code_matches_weka_statistics(claude) -> None:
    roots = [cs for cs in claude.tasks.values() if cs[0].parent is None]
    assert len(roots) == PRESETS["claude-code"].default_tasks
    n = np.median([len(cs) for cs in roots])
    start = np.median([cs[0].prompt_len for cs in roots])
    end = np.median([cs[-1].prompt_len for cs in roots])
    out = np.median([c.output_len for c in claude.calls])
    think = np.median([c.gap_s for c in claude.calls if c.index > 0])
    assert 48 * 0.85 <= n <= 48 * 1.15
    assert 24_775 * 0.9 <= start <= 24_775 * 1.1
    assert 137_529 * 0.8 <= end <= 137_529 * 1.2
    assert 218 * 0.9 <= out <= 218 * 1.1
    assert 10 * 0.85 <= think <= 10 * 1.15
    s = trace_stats(claude)
    assert 0.94 <= s.reuse_fraction <= 0.99  # WEKA: consecutive-request overlap median 96%
    # The ~15K tools + system head is shared by every session.
    heads = {cs[0].append[:15_000].tobytes() for cs in roots}
    assert len(heads) == 1
    assert len({cs[0].append[15_000:15_100].tobytes() for cs in roots}) == len(roots)


def test_claude_code_subagents_are_spawned_and_joined(claude) -> None:
    subs = [cs for cs in claude.tasks.values() if cs[0].parent is not None]
    assert subs
    for cs in subs:
        parent_task, k = cs[0].parent
        joiner = claude.tasks[parent_task][k + 1]
        assert (cs[0].task, cs[-1].index) in joiner.after
    # The written trace passes the reader's dependency checks.
    assert trace_stats(claude).subagents == len(subs)


def test_explainer_fits_five_sessions_in_180_gb() -> None:
    t = synth("explainer")
    assert len(t.tasks) == 5
    kib320 = 320 * 1024
    for cs in t.tasks.values():
        assert 86_000 <= cs[0].prompt_len <= 90_000  # starts near 88K
        growth = np.diff([c.prompt_len for c in cs])
        assert 413 + 700 <= growth.mean() <= 413 + 1300  # 413 output + ~1K tool result a turn
        assert all(c.output_len == 413 for c in cs)
        end_tokens = cs[-1].prompt_len + cs[-1].output_len
        assert 5 * end_tokens * kib320 <= 180e9
        assert len(cs) >= 10  # sessions keep taking turns


def test_same_seed_same_bytes_other_seed_differs(tmp_path: Path) -> None:
    a, b, c = (tmp_path / f"{x}.jsonl.gz" for x in "abc")
    write_trace(synth("claude-code", tasks=3, seed=7, scale=0.02), a)
    write_trace(synth("claude-code", tasks=3, seed=7, scale=0.02), b)
    write_trace(synth("claude-code", tasks=3, seed=8, scale=0.02), c)
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()
    back = read_trace(a)
    assert back.header.meta["seed"] == 7 and back.header.source == "synth:claude-code"


def test_more_tasks_extend_fewer() -> None:
    few = synth("swe-agent", tasks=3, seed=5, scale=0.05)
    many = synth("swe-agent", tasks=6, seed=5, scale=0.05)
    for t in few.tasks:
        for x, y in zip(few.steps(t), many.steps(t), strict=True):
            assert np.array_equal(x.prompt, y.prompt)
            assert x.call.gap_s == y.call.gap_s


def test_small_trace_knobs() -> None:
    t = synth("swe-agent", tasks=4, seed=1, scale=0.05, max_calls_per_task=6)
    assert len(t.tasks) == 4 and all(1 <= len(cs) <= 6 for cs in t.tasks.values())
    assert max(c.prompt_len for c in t.calls) < 5_000
    t = synth("claude-code", tasks=5, seed=2, max_prompt_tokens=3_000, shared_head_tokens=500)
    assert max(c.prompt_len for c in t.calls) <= 3_000
    roots = [cs for cs in t.tasks.values() if cs[0].parent is None]
    assert len({cs[0].append[:500].tobytes() for cs in roots}) == 1
    assert len({cs[0].append[500:510].tobytes() for cs in roots}) == len(roots)
    t = synth("swe-agent", tasks=3, seed=1, scale=0.05, shared_head_tokens=0, vocab_size=50)
    assert all(int(c.append.max()) < 50 for c in t.calls)
    assert len({cs[0].append[:5].tobytes() for cs in t.tasks.values()}) == 3


@pytest.mark.parametrize("preset", ["swe-agent", "claude-code"])
@pytest.mark.parametrize("cap", [50, 200, 300, 500])
def test_a_small_prompt_cap_keeps_each_first_prompt_past_its_shared_head(
    preset, cap, tmp_path
) -> None:
    """A first output longer than the room the shared head left made the first prompt shorter
    than the head: a numpy traceback from `trace synth`, `sweep` and `doctor` alike."""
    t = synth(preset, tasks=3, seed=0, max_prompt_tokens=cap)
    assert all(c.prompt_len + c.output_len <= cap for c in t.calls)
    write_trace(t, tmp_path / "t.jsonl", verify=True)  # read back with validate's checks


def test_every_preset_writes_a_valid_trace(tmp_path: Path) -> None:
    for name in PRESETS:
        p = tmp_path / f"{name}.jsonl"
        write_trace(synth(name, tasks=2, seed=3, scale=0.02, shared_head_tokens=64), p)
        t = read_trace(p)
        for task in t.tasks:
            for s in t.steps(task):
                assert len(s.prompt) == s.call.prompt_len


def test_unknown_preset_lists_valid_names() -> None:
    with pytest.raises(ConfigError) as ei:
        synth("nope", tasks=1)
    for name in PRESETS:
        assert name in str(ei.value)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"tasks": 0},
        {"scale": 0},
        {"scale": float("nan")},
        {"max_calls_per_task": 0},
        {"shared_head_tokens": -1},
        {"vocab_size": 1},
    ],
)
def test_bad_knobs_raise_config_error(kwargs) -> None:
    with pytest.raises(ConfigError):
        synth("swe-agent", **{"tasks": 1, **kwargs})


BUNDLED = {
    "swe-agent-small.jsonl.gz": {"preset": "swe-agent", "tasks": 8, "seed": 0, "scale": 0.25},
    "claude-code-small.jsonl.gz": {"preset": "claude-code", "tasks": 8, "seed": 0, "scale": 0.1},
    "explainer-small.jsonl.gz": {"preset": "explainer", "tasks": 5, "seed": 0, "scale": 0.1},
}


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_bundled_traces_are_small_valid_and_regenerable(name: str, tmp_path: Path) -> None:
    import gzip

    path = Path(__file__).resolve().parents[1] / "traces" / name
    assert path.stat().st_size < 1_000_000
    read_trace(path)  # validates
    fresh = tmp_path / name
    write_trace(synth(**BUNDLED[name]), fresh)
    # Compare the JSON text (gzip bytes may differ between zlib builds).
    assert gzip.decompress(path.read_bytes()) == gzip.decompress(fresh.read_bytes())
