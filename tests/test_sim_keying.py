"""The simulator's vectorized block keys partition blocks exactly as `ChunkKeyer` does."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.sim.keying import TaskKeyer
from replay.sim.keying_kernel import _prefix_len
from replay.trace.keys import ChunkKeyer
from replay.trace.synth import synth


def assert_same_partition(pairs: list[tuple[np.ndarray, np.ndarray]]) -> None:
    fwd: dict[int, int] = {}
    back: dict[int, int] = {}
    for ka, kb in pairs:
        assert len(ka) == len(kb)
        for x, y in zip(ka.tolist(), kb.tolist(), strict=True):
            assert fwd.setdefault(x, y) == y
            assert back.setdefault(y, x) == x


def test_agrees_with_chunk_keyer_on_a_synthetic_trace():
    trace = synth("claude-code", tasks=4, seed=2, scale=0.05)
    ours, ref = TaskKeyer(16), ChunkKeyer(16)
    pairs = []
    for task in trace.task_ids:
        for s in trace.steps(task):
            pairs.append(
                (
                    ours.keys(task, s.prompt, s.output),
                    ref.keys(np.concatenate([s.prompt, s.output])),
                )
            )
    assert_same_partition(pairs)


calls = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]),
        st.integers(0, 40),  # keep this many tokens of the task's previous context
        st.lists(st.integers(0, 3), max_size=30),  # appended prompt tokens (tiny vocab: collisions)
        st.lists(st.integers(0, 3), max_size=10),  # output
    ),
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(calls=calls, block=st.sampled_from([1, 2, 4]))
def test_agrees_with_chunk_keyer_on_random_edits(calls, block):
    ours, ref = TaskKeyer(block), ChunkKeyer(block)
    ctx: dict[str, np.ndarray] = {}
    pairs = []
    when_made: list[list[int]] = []
    for task, keep, append, out in calls:
        prev = ctx.get(task, np.empty(0, np.int32))
        prompt = np.concatenate([prev[:keep], np.array(append, np.int32)])
        if len(prompt) == 0:
            continue
        output = np.array(out, np.int32)
        pairs.append((ours.keys(task, prompt, output), ref.keys(np.concatenate([prompt, output]))))
        ctx[task] = np.concatenate([prompt, output])
        when_made.append(pairs[-1][0].tolist())
    assert_same_partition(pairs)
    # a task's keys share one buffer: what a later call wrote must not show in earlier keys
    assert [k.tolist() for k, _ in pairs] == when_made
    assert all(not k.flags.writeable for k, _ in pairs)


def test_ids_are_numbered_in_order_of_first_appearance():
    """Dense ids are the order in which each block prefix first appears over the calls (what a
    per-block dict numbering gives), so records do not depend on how the keyer finds them."""
    trace = synth("swe-agent", tasks=6, seed=4, scale=0.05)
    ours, ref = TaskKeyer(16), ChunkKeyer(16)
    first: dict[int, int] = {}
    for task in trace.task_ids:
        for s in trace.steps(task):
            got = ours.keys(task, s.prompt, s.output)
            want = [
                first.setdefault(x, len(first))
                for x in ref.keys(np.concatenate([s.prompt, s.output])).tolist()
            ]
            assert got.tolist() == want
    assert len(ours) == len(first)


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """The kernel's prefix compare of two one-piece contexts (empty outputs), uncapped."""
    none = np.empty(0, np.int32)
    a, b = a.astype(np.int32), b.astype(np.int32)
    return int(_prefix_len(a, none, b, none, len(a) + len(b)))


def test_common_prefix():
    a = np.array([1, 2, 3, 4])
    assert common_prefix(a, np.array([1, 2, 9])) == 2
    assert common_prefix(a, a[:2]) == 2
    assert common_prefix(a, np.array([], dtype=int)) == 0
    assert common_prefix(a, np.array([7])) == 0


def test_prefix_compare_walks_both_pieces_of_each_context():
    """(prompt + output) against the previous (prompt + output), split at different places, past
    a whole unrolled run, and capped."""
    rng = np.random.default_rng(3)
    ctx = rng.integers(0, 9, size=300).astype(np.int32)
    other = ctx.copy()
    other[200] += 1  # differs at 200
    for pa, pb in ((10, 250), (250, 10), (0, 300), (200, 200)):
        got = int(_prefix_len(ctx[:pa], ctx[pa:], other[:pb], other[pb:], 1000))
        assert got == 200
    assert int(_prefix_len(ctx[:50], ctx[50:], ctx[:120], ctx[120:], 130)) == 130


def test_token_mix_table_gives_the_direct_mix_for_any_int32_id():
    """The per-token mix comes from a table grown to the largest id seen; negative ids and ids
    past the table's limit are mixed directly. Every id must mix exactly as the formula does,
    and keys must not depend on whether the table covered an id when its call was keyed."""
    from replay.sim.keying_kernel import TOKEN_MUL, mix_tokens
    from replay.trace.tokens import splitmix64

    k = TaskKeyer(4)
    cold = TaskKeyer(4)
    batches = [
        np.array([0, 1, 2, 3, 7, 7, 9, 11], np.int32),  # builds the table
        np.array([5, 300, 70000, 4], np.int32),  # grows it
        np.array([-1, 3, -(2**31), 2], np.int32),  # negative ids
        np.array([2**31 - 1, 1 << 21, 6, 0], np.int32),  # past the table's limit
    ]
    for i, tokens in enumerate(batches):
        want = splitmix64(tokens.astype(np.uint64) * TOKEN_MUL)
        assert mix_tokens(tokens, k._tokmix).tolist() == want.tolist()
        assert mix_tokens(tokens, np.empty(0, np.uint64)).tolist() == want.tolist()
        got = k.keys(f"t{i}", tokens, np.empty(0, np.int32))
        cold._tokmix = np.empty(0, np.uint64)  # every id mixed directly
        assert got.tolist() == cold.keys(f"t{i}", tokens, np.empty(0, np.int32)).tolist()
    assert len(k._tokmix) == 70001  # grown to the largest id in range, never to the large ones


def test_the_id_table_grows_without_renumbering():
    """Ids survive the table's rehashes: keying past many growths gives what one large table
    gives, and a prefix seen before keeps its id."""
    rng = np.random.default_rng(5)
    small, large = TaskKeyer(2), TaskKeyer(2)
    large._room(1 << 16)
    for i in range(60):
        prompt = rng.integers(0, 50, size=int(rng.integers(1, 400)), dtype=np.int32)
        out = rng.integers(0, 50, size=3, dtype=np.int32)
        task = f"t{i % 7}"
        assert small.keys(task, prompt, out).tolist() == large.keys(task, prompt, out).tolist()
    assert len(small) == len(large) > 4096 // 2
    assert len(small._table) > 2 << 12
