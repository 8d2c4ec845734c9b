"""Incremental keying equals keying every expanded prompt from scratch (Trace.steps is the oracle)."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.errors import ConfigError
from replay.model.streams import build_stream, key_trace, order_indices
from replay.trace.keys import ChunkKeyer
from replay.trace.model import Call, Trace, TraceHeader
from tests.model_traces import agent_tasks, make_trace


def reference_keys(trace: Trace, chunk: int, block: int):
    """Keys of each call's full prompt (chunks) and context minus the last output token (blocks)."""
    ck, bk = ChunkKeyer(chunk), ChunkKeyer(block)
    host, dev = {}, {}
    for task in trace.tasks:
        for s in trace.steps(task):
            host[s.call.ref] = ck.keys(s.prompt).tolist()
            dev[s.call.ref] = bk.keys(np.concatenate([s.prompt, s.output[:-1]])).tolist()
    return host, dev


def _same_partition(a: dict, b: dict) -> bool:
    """Equal up to renaming of ids (first-appearance order may differ between walks)."""
    fwd, back = {}, {}
    for ref in a:
        if len(a[ref]) != len(b[ref]):
            return False
        for x, y in zip(a[ref], b[ref], strict=True):
            if fwd.setdefault(x, y) != y or back.setdefault(y, x) != x:
                return False
    return True


def _check(trace, chunk, block):
    keyed = key_trace(trace, chunk, block)
    host, dev = reference_keys(trace, chunk, block)
    got_host = {r: k.tolist() for r, k in zip(keyed.refs, keyed.host_keys, strict=True)}
    got_dev = {r: k.tolist() for r, k in zip(keyed.refs, keyed.device_keys, strict=True)}
    assert _same_partition(got_host, host)
    assert _same_partition(got_dev, dev)
    assert keyed.prompt_tokens.tolist() == [c.prompt_len for c in trace.calls]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([1, 3, 8]), st.sampled_from([1, 2, 5]))
def test_id_traces_with_recorded_outputs(seed, chunk, block):
    rng = np.random.default_rng(seed)
    trace = make_trace(agent_tasks(rng, n_tasks=3, n_calls=4, head=int(rng.integers(0, 10))))
    _check(trace, chunk, block)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([2, 4]))
def test_id_traces_with_stand_in_outputs(seed, chunk):
    # outputs recorded by length only: the batch stand-ins must equal Trace.output_ids
    rng = np.random.default_rng(seed)
    trace = make_trace(agent_tasks(rng, n_tasks=3, n_calls=4))
    calls = [dataclasses.replace(c, output=None) for c in trace.calls]
    _check(Trace(trace.header, calls), chunk, 2)


def block_trace(rng) -> Trace:
    """A block-hash trace: each call keeps most of the previous prompt's blocks and appends new ones."""
    bs = 4
    calls = []
    for t in range(3):
        blocks: list[int] = []
        for i in range(4):
            keep = int(rng.integers(0, len(blocks) + 1)) if blocks else 0
            fresh = rng.integers(0, 6, int(rng.integers(1, 5))).tolist()
            blocks = blocks[:keep] + fresh
            prompt_len = len(blocks) * bs - int(rng.integers(0, bs))  # last block may be partial
            calls.append(
                Call(
                    task=f"t{t}",
                    index=i,
                    gap_s=0.0,
                    keep=keep,
                    append=np.array(fresh, dtype=np.int64),
                    prompt_len=prompt_len,
                    output_len=int(rng.integers(1, 6)),
                    ns="shared" if t < 2 else None,  # two tasks share a namespace: common blocks
                )
            )
    return Trace(TraceHeader(tokens="blocks", block_size=bs, vocab_size=50), calls)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([2, 4, 8]))
def test_block_traces(seed, chunk):
    _check(block_trace(np.random.default_rng(seed)), chunk, 4)


def test_stream_concatenates_in_the_given_order():
    trace = make_trace({"a": [([1, 2, 3, 4], [5])], "b": [([7, 8], [9])]})
    keyed = key_trace(trace, 2)
    s = build_stream(keyed.host_keys, order_indices(keyed, [("b", 0), ("a", 0)]))
    assert s.offsets.tolist() == [0, 1, 3]
    assert s.keys.tolist() == keyed.host_keys[1].tolist() + keyed.host_keys[0].tolist()


def test_bad_sizes_and_orders_raise_config_errors():
    trace = make_trace({"a": [([1, 2], [3])]})
    with pytest.raises(ConfigError):
        key_trace(trace, 0)
    keyed = key_trace(trace, 1)
    with pytest.raises(ConfigError, match="twice"):
        order_indices(keyed, [("a", 0), ("a", 0)])
