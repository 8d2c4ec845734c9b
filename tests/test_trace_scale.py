"""`scale_trace`: the reuse-structure invariant, property-tested on synthetic and real traces.

The oracle is the definition: for every pair of calls, the scaled prompts' common prefix is
floor(L / K) where L is the originals' (computed on the expanded token ids).
"""

from __future__ import annotations

import functools
import itertools
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay.errors import ConfigError
from replay.trace.importers import import_trace
from replay.trace.io import read_trace, write_trace
from replay.trace.model import Call, Trace, TraceHeader
from replay.trace.scale import parse_fraction, scale_trace
from replay.trace.slicing import slice_trace
from replay.trace.stats import common_prefix_len, trace_stats

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
# In CI the shared traces must be there: a missing directory fails the test instead of skipping.
_CI = os.environ.get("CI") == "true"
needs_shared = pytest.mark.skipif(
    not SHARED.is_dir() and not _CI, reason="../shared/traces not present"
)


def _prompts(trace: Trace) -> dict:
    return {s.call.ref: s.prompt for t in trace.tasks for s in trace.steps(t)}


def assert_structure_kept(orig: Trace, scaled: Trace, k: int, pairs=None) -> None:
    """Every pair of calls: scaled common prefix == floor(original common prefix / K)."""
    p, s = _prompts(orig), _prompts(scaled)
    assert list(p) == list(s)
    for ref in p:
        n = len(p[ref])
        assert len(s[ref]) == (n // k if n >= k or n == 0 else 1), ref
    for a, b in pairs if pairs is not None else itertools.combinations(p, 2):
        want = common_prefix_len(p[a], p[b]) // k
        assert common_prefix_len(s[a], s[b]) == want, (a, b)


def assert_shape_kept(orig: Trace, scaled: Trace, time_factor: float) -> None:
    assert [c.ref for c in scaled.calls] == [c.ref for c in orig.calls]
    for a, b in zip(orig.calls, scaled.calls, strict=True):
        assert (b.parent, b.after) == (a.parent, a.after)
        assert b.gap_s == pytest.approx(a.gap_s * time_factor)
        assert (b.at_s is None) == (a.at_s is None)
        if a.at_s is not None:
            assert b.at_s == pytest.approx(a.at_s * time_factor)
        assert (b.output_len > 0) == (a.output_len > 0)


# --- synthetic traces ---------------------------------------------------------------------------

_tok = st.integers(0, 1)  # two symbols: prompts collide often, so sharing is everywhere


@st.composite
def ids_traces(draw) -> Trace:
    calls: list[Call] = []
    n_tasks = draw(st.integers(1, 3))
    for t in range(n_tasks):
        ctx: list[int] = []
        for i in range(draw(st.integers(1, 4))):
            keep = draw(st.integers(0, len(ctx)))
            prompt = ctx[:keep] + draw(st.lists(_tok, max_size=24))
            output = draw(st.lists(_tok, max_size=8))
            parent = ("t0", 0) if t and i == 0 and draw(st.booleans()) else None
            calls.append(
                Call(
                    task=f"t{t}", index=i, gap_s=draw(st.floats(0, 5)), keep=keep,
                    append=np.array(prompt[keep:], np.int32), prompt_len=len(prompt),
                    output_len=len(output), output=np.array(output, np.int32), parent=parent,
                )
            )  # fmt: skip
            ctx = prompt + output
    return Trace(TraceHeader(tokens="ids", vocab_size=64), calls)


@st.composite
def block_traces(draw) -> Trace:
    bs = draw(st.integers(1, 4))
    shared_ns = draw(st.booleans())  # WEKA: one namespace per conversation
    calls: list[Call] = []
    for t in range(draw(st.integers(1, 3))):
        prev: list[int] = []
        for i in range(draw(st.integers(1, 4))):
            keep = draw(st.integers(0, len(prev)))
            blocks = prev[:keep] + draw(st.lists(st.integers(0, 3), max_size=6))
            nb = len(blocks)
            plen = draw(st.integers(max(0, (nb - 1) * bs + 1), (nb + 1) * bs - 1))
            calls.append(
                Call(
                    task=f"t{t}", index=i, gap_s=1.0, keep=keep,
                    append=np.array(blocks[keep:], np.int64), prompt_len=plen,
                    output_len=draw(st.integers(0, 9)), ns="conv" if shared_ns else None,
                    at_s=float(t) if draw(st.booleans()) else None,
                )
            )  # fmt: skip
            prev = blocks
    return Trace(TraceHeader(tokens="blocks", vocab_size=64, block_size=bs), calls)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ids_traces(), st.integers(1, 5), st.sampled_from([0.0, 0.5, 1.0, 3.0]))
def test_scaled_ids_traces_keep_every_common_prefix(trace, k, f):
    scaled = scale_trace(trace, k, f)
    assert_structure_kept(trace, scaled, k)
    assert_shape_kept(trace, scaled, f)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(block_traces(), st.integers(1, 5), st.sampled_from([0.5, 1.0]))
def test_scaled_block_traces_keep_every_common_prefix(trace, k, f):
    scaled = scale_trace(trace, k, f)
    assert scaled.header.tokens == "ids"
    assert_structure_kept(trace, scaled, k)
    assert_shape_kept(trace, scaled, f)


def test_scaled_trace_round_trips_through_the_file_format(tmp_path):
    from replay.trace.synth import synth

    trace = synth("claude-code", tasks=4, seed=2, scale=0.05, vocab_size=512)
    scaled = scale_trace(trace, 8, 0.5)
    write_trace(scaled, tmp_path / "s.jsonl.gz")
    back = read_trace(tmp_path / "s.jsonl.gz")
    assert _prompts(back).keys() == _prompts(scaled).keys()
    for (ref, a), b in zip(_prompts(back).items(), _prompts(scaled).values(), strict=True):
        assert np.array_equal(a, b), ref
    assert back.header.meta["scaled"] == {"tokens_divisor": 8, "time_factor": 0.5}
    again = scale_trace(back, 2)
    assert again.header.meta["scaled"]["tokens_divisor"] == 16


def test_scaling_a_scaled_block_trace_keeps_the_block_size_it_came_from():
    calls = [Call(task="t", index=0, gap_s=0.0, keep=0, append=np.arange(4), prompt_len=64,
                  output_len=2)]  # fmt: skip
    trace = Trace(TraceHeader(tokens="blocks", vocab_size=64, block_size=16), calls)
    once = scale_trace(trace, 2)
    twice = scale_trace(once, 2)
    assert once.header.meta["scaled"]["from_block_size"] == 16
    assert twice.header.meta["scaled"] == {
        "tokens_divisor": 4,
        "time_factor": 1.0,
        "from_block_size": 16,
    }


def test_sibling_blocks_never_share_a_token_even_in_a_tiny_vocabulary():
    # 4 one-token-block prompts that differ in their first block, vocabulary of 4: only
    # collision-free assignment keeps them apart; a fifth distinct sibling cannot be placed.
    h = TraceHeader(tokens="ids", vocab_size=5)
    calls = [
        Call(task=f"t{i}", index=0, gap_s=0.0, keep=0, append=np.array([i, 0], np.int32),
             prompt_len=2, output_len=0)
        for i in range(5)
    ]  # fmt: skip
    scaled = scale_trace(Trace(h, calls), 2)
    firsts = {int(s.prompt[0]) for t in scaled.tasks for s in scaled.steps(t)}
    assert len(firsts) == 5
    with pytest.raises(ConfigError):
        scale_trace(Trace(TraceHeader(tokens="ids", vocab_size=4), calls), 2)


@pytest.mark.parametrize("text,k", [("1/16", 16), ("1/1", 1), ("1", 1), (" 1/ 4", 4)])
def test_parse_fraction(text, k):
    assert parse_fraction(text) == k


@pytest.mark.parametrize("text", ["16", "2/16", "1/0", "1/x", "0.25", ""])
def test_parse_fraction_refuses_anything_but_one_over_k(text):
    with pytest.raises(ConfigError, match="1/K"):
        parse_fraction(text)


# --- real traces --------------------------------------------------------------------------------


@functools.cache
def _mooncake_head() -> Trace:
    full = import_trace("mooncake", [str(SHARED / "mooncake" / "conversation_trace.jsonl")])
    return slice_trace(full, tasks=200)


@functools.cache
def _weka(name: str) -> Trace:
    return import_trace("weka", [str(SHARED / "weka" / f"{name}.json")], vocab_size=8192)


def _stats_close(orig: Trace, scaled: Trace, k: int) -> None:
    a, b = trace_stats(orig), trace_stats(scaled)
    assert (b.calls, b.tasks, b.subagents) == (a.calls, a.tasks, a.subagents)
    assert b.prompt_tokens == pytest.approx(a.prompt_tokens / k, rel=0.01, abs=a.calls)
    assert abs(b.reuse_fraction - a.reuse_fraction) < 0.01


@needs_shared
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["trace_0291", "trace_0485", "trace_0277", "trace_0526"]),
    st.sampled_from([4, 16, 64, 100]),
    st.data(),
)
def test_real_weka_traces_keep_structure_and_stats(name, k, data):
    trace = _weka(name)
    scaled = scale_trace(trace, k)
    _stats_close(trace, scaled, k)
    refs = [c.ref for c in trace.calls]
    pairs = data.draw(
        st.lists(st.tuples(st.sampled_from(refs), st.sampled_from(refs)), max_size=80)
    )
    assert_structure_kept(trace, scaled, k, pairs=pairs + list(itertools.pairwise(refs)))


@needs_shared
def test_real_weka_trace_with_subagents_keeps_its_dag():
    trace = _weka("trace_0291")
    assert trace_stats(trace).subagents == 2
    scaled = scale_trace(trace, 64, 0.1)
    assert_shape_kept(trace, scaled, 0.1)
    assert_structure_kept(trace, scaled, 64)  # all 496 pairs, parent and sub-agents


@needs_shared
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([8, 32, 512]), st.data())
def test_real_mooncake_trace_keeps_structure_and_stats(k, data):
    trace = _mooncake_head()
    scaled = scale_trace(trace, k, 2.0)
    _stats_close(trace, scaled, k)
    assert_shape_kept(trace, scaled, 2.0)
    refs = [c.ref for c in trace.calls]
    pairs = data.draw(
        st.lists(st.tuples(st.sampled_from(refs), st.sampled_from(refs)), max_size=300)
    )
    assert_structure_kept(trace, scaled, k, pairs=pairs + list(itertools.pairwise(refs)))
