"""Trace reader/writer: exact round trips (Hypothesis) and one test per malformed-input class."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay.errors import TraceError
from replay.trace.io import (
    call_to_dict,
    header_to_dict,
    read_header,
    read_trace,
    read_trace_checked,
    write_trace,
)
from replay.trace.model import Call, Trace, TraceHeader

# ------------------------------------------------------------------------------------ round trip


def _plain(d: dict) -> dict:
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in d.items()}


def _assert_same(a: Trace, b: Trace) -> None:
    assert header_to_dict(a.header) == header_to_dict(b.header)
    assert list(a.tasks) == list(b.tasks)
    for t in a.tasks:
        assert [_plain(call_to_dict(c)) for c in a.tasks[t]] == [
            _plain(call_to_dict(c)) for c in b.tasks[t]
        ]
        for x, y in zip(a.tasks[t], b.tasks[t], strict=True):
            assert x.append.dtype == y.append.dtype


_finite = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)


@st.composite
def traces(draw) -> Trace:
    blocks = draw(st.booleans())
    vocab = draw(st.integers(2, 70000))
    bs = draw(st.integers(1, 16)) if blocks else None
    header = TraceHeader(
        tokens="blocks" if blocks else "ids",
        vocab_size=vocab,
        block_size=bs,
        model=draw(st.none() | st.text(min_size=1, max_size=8)),
        source=draw(st.none() | st.just("test")),
        meta=draw(
            st.dictionaries(
                st.text(max_size=4), st.integers(-(2**63), 2**63 - 1) | st.text(max_size=4)
            )
        ),
    )
    calls: list[Call] = []
    n_tasks = draw(st.integers(1, 4))
    for t in range(n_tasks):
        task = f"t{t}" if draw(st.booleans()) else f"task/ü-{t}"
        n_calls = draw(st.integers(1, 4))
        ns = draw(st.none() | st.just("shared"))  # one per task: kept blocks stay in theirs
        ctx = 0
        for i in range(n_calls):
            keep = draw(st.integers(0, ctx))
            fresh = int(keep == 0)  # a prompt has at least one token
            if blocks:
                assert bs is not None
                append = np.array(
                    draw(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=fresh, max_size=5)),
                    np.int64,
                )
                n_blocks = keep + len(append)
                prompt_len = draw(
                    st.integers(max(1, (n_blocks - 1) * bs + 1), (n_blocks + 1) * bs - 1)
                )
            else:
                ids = st.lists(st.integers(0, vocab - 1), min_size=fresh, max_size=12)
                append = np.array(draw(ids), np.int32)
                prompt_len = keep + len(append)
            output = None
            if draw(st.booleans()):
                output = np.array(draw(st.lists(st.integers(0, vocab - 1), max_size=6)), np.int32)
                output_len = len(output)
            else:
                output_len = draw(st.integers(0, 50))
            after: tuple = ()
            earlier = [c.ref for c in calls if c.task != task]
            if earlier and draw(st.booleans()):
                after = tuple(draw(st.lists(st.sampled_from(earlier), min_size=1, max_size=2)))
            parent = None
            if i == 0 and earlier and draw(st.booleans()):
                parent = draw(st.sampled_from(earlier))
            calls.append(
                Call(
                    task=task,
                    index=i,
                    gap_s=draw(_finite),
                    keep=keep,
                    append=append,
                    prompt_len=prompt_len,
                    output_len=output_len,
                    output=output,
                    after=after,
                    at_s=draw(st.none() | _finite),
                    tail_gap_s=draw(st.none() | _finite) if i == n_calls - 1 else None,
                    recorded=draw(st.none() | st.fixed_dictionaries({"start_s": _finite})),
                    ns=ns,
                    parent=parent,
                )
            )
            ctx = n_blocks if blocks else prompt_len + output_len
    return Trace(header, calls)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(trace=traces(), gz=st.booleans())
def test_round_trip_is_exact(tmp_path: Path, trace: Trace, gz: bool) -> None:
    p = tmp_path / ("t.jsonl.gz" if gz else "t.jsonl")
    write_trace(trace, p)
    back = read_trace(p)
    _assert_same(trace, back)
    # Re-writing what was read gives the same bytes (canonical key order, gzip mtime 0).
    q = tmp_path / ("u.jsonl.gz" if gz else "u.jsonl")
    write_trace(back, q)
    assert p.read_bytes() == q.read_bytes()
    # Expanded prompts survive too.
    for t in trace.tasks:
        for x, y in zip(trace.steps(t), back.steps(t), strict=True):
            assert np.array_equal(x.prompt, y.prompt)
            assert len(x.prompt) == x.call.prompt_len


@settings(max_examples=100, deadline=None)
@given(trace=traces())
def test_expanded_id_prompts_are_the_kept_context_plus_the_appended_ids(trace: Trace) -> None:
    """`steps` writes each prompt's new tokens into one growing buffer per task; the plain
    definition builds the whole context (previous prompt + its output ids) first and keeps a
    prefix of it. Every prompt must still hold its tokens after the task's later calls were
    expanded (they share memory), and none can be written through."""
    if trace.header.tokens != "ids":
        return
    for task in trace.task_ids:
        ctx = np.empty(0, np.int32)
        seen: list[tuple[np.ndarray, np.ndarray]] = []
        for step in trace.steps(task):
            want = np.concatenate([ctx[: step.call.keep], step.call.append])
            assert step.prompt.dtype == np.int32 and np.array_equal(step.prompt, want)
            assert not step.prompt.flags.writeable
            seen.append((step.prompt, want))
            ctx = np.concatenate([want, trace.output_ids(step.call)])
        for got, want in seen:
            assert np.array_equal(got, want)


def test_gzip_detected_by_content_and_written_by_name(tmp_path: Path) -> None:
    trace = Trace(TraceHeader(), [Call("a", 0, 0.0, 0, np.array([1, 2], np.int32), 2, 1)])
    gz = tmp_path / "t.jsonl.gz"
    write_trace(trace, gz)
    assert gz.read_bytes()[:2] == b"\x1f\x8b"
    odd = tmp_path / "t.jsonl"  # gzip content under a plain name still reads
    odd.write_bytes(gz.read_bytes())
    assert read_trace(odd).calls[0].append.tolist() == [1, 2]
    plain = tmp_path / "p.jsonl"
    write_trace(trace, plain)
    assert plain.read_bytes().startswith(b'{"format":"replay-trace"')
    assert read_header(plain).vocab_size == 32000


def test_token_dtypes(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    _write(p, [HEADER, CALL0])
    c = read_trace(p).calls[0]
    assert c.append.dtype == np.int32
    p2 = tmp_path / "b.jsonl"
    _write(p2, [BLOCKS_HEADER, {**CALL0, "append": [2**40, -5], "prompt_len": 8}])
    assert read_trace(p2).calls[0].append.dtype == np.int64
    assert read_trace(p2).calls[0].append.tolist() == [2**40, -5]


# -------------------------------------------------------------------------------- malformed input

HEADER = {"format": "replay-trace", "version": 1, "tokens": "ids", "vocab_size": 100}
BLOCKS_HEADER = {
    "format": "replay-trace",
    "version": 1,
    "tokens": "blocks",
    "vocab_size": 100,
    "block_size": 4,
}
CALL0 = {"task": "a", "call": 0, "gap_s": 0.0, "keep": 0, "append": [1, 2, 3], "output_len": 2}
CALL1 = {"task": "a", "call": 1, "gap_s": 1.5, "keep": 5, "append": [4], "output_len": 1}


def _write(p: Path, lines: list) -> None:
    p.write_bytes(b"".join((x if isinstance(x, bytes) else orjson.dumps(x)) + b"\n" for x in lines))


def _error(tmp_path: Path, lines: list) -> TraceError:
    p = tmp_path / "bad.jsonl"
    _write(p, lines)
    with pytest.raises(TraceError) as ei:
        read_trace(p)
    assert ei.value.file == str(p)
    return ei.value


def test_good_trace_reads(tmp_path: Path) -> None:
    p = tmp_path / "ok.jsonl"
    _write(p, [HEADER, CALL0, CALL1])
    t = read_trace(p)
    assert [s.prompt.tolist()[:3] for s in t.steps("a")] == [[1, 2, 3], [1, 2, 3]]
    assert t.calls[1].prompt_len == 6


def test_empty_file(tmp_path: Path) -> None:
    p = tmp_path / "empty.jsonl"
    p.write_bytes(b"")
    with pytest.raises(TraceError, match="empty file") as ei:
        read_trace(p)
    assert ei.value.line == 1


def test_missing_header(tmp_path: Path) -> None:
    e = _error(tmp_path, [CALL0])
    assert (e.line, e.field) == (1, "format") and "missing header" in e.why
    assert "replay trace import --from weka|mooncake" in e.why  # a raw trace given as is


def test_unknown_header(tmp_path: Path) -> None:
    e = _error(tmp_path, [{**HEADER, "format": "other-trace"}, CALL0])
    assert (e.line, e.field) == (1, "format") and "unknown format" in e.why
    e = _error(tmp_path, [{**HEADER, "colour": "red"}, CALL0])
    assert (e.line, e.field) == (1, "colour")


def test_a_block_size_past_a_calls_limit_is_refused(tmp_path: Path) -> None:
    """validate said ok and `trace stats` asked for 7.45 GiB to expand one id."""
    header = {**HEADER, "tokens": "blocks", "block_size": 1_000_000_000}
    e = _error(tmp_path, [header, {"task": "a", "call": 0, "append": [1], "prompt_len": 5}])
    assert (e.line, e.field) == (1, "block_size") and "at most 16,777,216" in e.why


def test_keeping_blocks_across_a_namespace_change_is_refused(tmp_path: Path) -> None:
    """A kept block is the previous prompt's tokens (made in its namespace), so a task whose
    call keeps blocks under another `ns` would replay other tokens than the spec defines."""
    header = {**HEADER, "tokens": "blocks", "block_size": 4}
    c0 = {"task": "a", "call": 0, "gap_s": 0, "keep": 0, "ns": "x", "append": [1], "prompt_len": 4,
          "output_len": 1}  # fmt: skip
    moved = {**c0, "call": 1, "ns": "y", "keep": 1, "append": [2], "prompt_len": 8}
    e = _error(tmp_path, [header, c0, moved])
    assert (e.line, e.field) == (3, "ns") and "'y' differs" in e.why and "'x'" in e.why
    p = tmp_path / "ok.jsonl"  # the same namespace, or a fresh start in another, read fine
    rows = [header, c0, {**moved, "ns": "x"}, {**moved, "call": 2, "keep": 0, "prompt_len": 4}]
    p.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    assert [c.ns for c in read_trace(p).tasks["a"]] == ["x", "x", "y"]


def test_unsupported_version(tmp_path: Path) -> None:
    e = _error(tmp_path, [{**HEADER, "version": 2}, CALL0])
    assert (e.line, e.field) == (1, "version") and "unsupported version 2" in e.why


def test_invalid_json(tmp_path: Path) -> None:
    e = _error(tmp_path, [HEADER, CALL0, b'{"task": "a", "call": 1,'])
    assert (e.line, e.field) == (3, None) and "invalid JSON" in e.why


def test_non_object_line(tmp_path: Path) -> None:
    e = _error(tmp_path, [HEADER, [1, 2, 3]])
    assert e.line == 2 and "JSON object" in e.why and "array" in e.why


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("gap_s", None, "missing"),
        ("task", None, "missing"),
        ("append", None, "missing"),
        ("output_len", None, "missing"),
        ("keep", "3", "integer"),
        ("call", 0.5, "integer"),
        ("task", 7, "string"),
        ("append", "1 2 3", "array"),
        ("append", [1, 2.5], "integer"),  # named at its index: append[1]
        ("gap_s", "soon", "number"),
        ("after", {"a": 1}, "array"),
        ("recorded", [1], "object"),
        ("prompt_len", 9, "keep + len(append)"),
        ("colour", "red", "unknown call field"),
    ],
)
def test_missing_or_ill_typed_field(tmp_path: Path, field: str, value, why: str) -> None:
    call = {**CALL0, field: value}
    if value is None:
        del call[field]
    e = _error(tmp_path, [HEADER, call])
    assert (e.line, e.field) == (2, "append[1]" if value == [1, 2.5] else field)
    assert why in e.why


@pytest.mark.parametrize("value", [-0.5, -1])
def test_negative_gap(tmp_path: Path, value: float) -> None:
    e = _error(tmp_path, [HEADER, {**CALL0, "gap_s": value}])
    assert (e.line, e.field) == (2, "gap_s") and ">= 0" in e.why


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity"])
def test_non_finite_gap(tmp_path: Path, literal: bytes) -> None:
    line = orjson.dumps({**CALL1, "gap_s": 12345.0}).replace(b"12345.0", literal)
    e = _error(tmp_path, [HEADER, CALL0, line])
    assert (e.line, e.field) == (3, "gap_s") and "finite" in e.why


def test_keep_longer_than_previous_context(tmp_path: Path) -> None:
    # previous context = 3 prompt + 2 output = 5 tokens
    e = _error(tmp_path, [HEADER, CALL0, {**CALL1, "keep": 6}])
    assert (e.line, e.field) == (3, "keep") and "only 5" in e.why
    e = _error(tmp_path, [HEADER, {**CALL0, "keep": 1}])
    assert (e.line, e.field) == (2, "keep")
    # blocks: keep counts blocks of the previous prompt
    blocks = {**CALL0, "append": [7, 8], "prompt_len": 8}
    e = _error(tmp_path, [BLOCKS_HEADER, blocks, {**CALL1, "keep": 3, "prompt_len": 13}])
    assert (e.line, e.field) == (3, "keep") and "blocks" in e.why


@pytest.mark.parametrize(("field", "bad"), [("append", 100), ("append", -1), ("output", 1000)])
def test_token_id_outside_vocab(tmp_path: Path, field: str, bad: int) -> None:
    call = {**CALL0, field: [1, bad, 2]}
    if field == "output":
        call["output_len"] = 3
    e = _error(tmp_path, [HEADER, call])
    assert (e.line, e.field) == (2, field) and str(bad) in e.why and "vocab_size 100" in e.why


def test_duplicate_call_index(tmp_path: Path) -> None:
    e = _error(tmp_path, [HEADER, CALL0, CALL0])
    assert (e.line, e.field) == (3, "call") and "duplicate" in e.why


def test_out_of_order_call_index(tmp_path: Path) -> None:
    e = _error(tmp_path, [HEADER, {**CALL1, "keep": 0}])
    assert (e.line, e.field) == (2, "call") and "out-of-order" in e.why and "expected 0" in e.why


def test_dependency_on_unknown_call(tmp_path: Path) -> None:
    b0 = {**CALL0, "task": "b", "after": [["a", 7]]}
    e = _error(tmp_path, [HEADER, CALL0, b0])
    assert (e.line, e.field) == (3, "after") and "unknown call" in e.why
    e = _error(tmp_path, [HEADER, CALL0, {**CALL0, "task": "b", "parent": ["zz", 0]}])
    assert (e.line, e.field) == (3, "parent")


def test_dependency_cycle(tmp_path: Path) -> None:
    # a1 waits for b0, and b0 was spawned by a1: a cycle through the implicit edges.
    a1 = {**CALL1, "after": [["b", 0]]}
    b0 = {**CALL0, "task": "b", "parent": ["a", 1]}
    e = _error(tmp_path, [HEADER, CALL0, a1, b0])
    assert e.field == "after" and "cycle" in e.why
    # Two tasks waiting on each other.
    a0 = {**CALL0, "after": [["b", 0]]}
    b0 = {**CALL0, "task": "b", "after": [["a", 0]]}
    e = _error(tmp_path, [HEADER, a0, b0])
    assert "cycle" in e.why and e.line == 2


def test_other_structural_errors(tmp_path: Path) -> None:
    e = _error(tmp_path, [HEADER, {**CALL0, "after": [["a", 0]]}])
    assert e.field == "after" and "own task" in e.why
    e = _error(tmp_path, [HEADER, CALL0, {**CALL1, "parent": ["x", 0]}])
    assert e.field == "parent" and "first call" in e.why
    e = _error(tmp_path, [HEADER, {**CALL0, "tail_gap_s": 1.0}, CALL1])
    assert (e.line, e.field) == (2, "tail_gap_s")
    e = _error(tmp_path, [HEADER, CALL0, HEADER])
    assert (e.line, e.field) == (3, "format")
    e = _error(tmp_path, [{**HEADER, "tokens": "blocks"}, CALL0])
    assert (e.line, e.field) == (1, "block_size")
    e = _error(tmp_path, [BLOCKS_HEADER, {**CALL0, "prompt_len": 40}])
    assert (e.line, e.field) == (2, "prompt_len") and "do not fit" in e.why
    e = _error(tmp_path, [HEADER, {**CALL0, "output": [1], "output_len": 2}])
    assert (e.line, e.field) == (2, "output_len")


def test_corrupt_gzip(tmp_path: Path) -> None:
    good = tmp_path / "g.jsonl.gz"
    with gzip.open(good, "wb") as f:
        f.write(orjson.dumps(HEADER) + b"\n" + orjson.dumps(CALL0) * 2000)
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(good.read_bytes()[:60])
    with pytest.raises(TraceError, match="corrupt gzip"):
        read_trace(bad)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot open"):
        read_trace(tmp_path / "nope.jsonl")


def test_blocks_prompt_with_unhashed_tail_expands(tmp_path: Path) -> None:
    # 2 blocks of 4 tokens + a 3-token tail without a hash id (as WEKA records it).
    p = tmp_path / "b.jsonl"
    c0 = {**CALL0, "append": [10, 11], "prompt_len": 11}
    c1 = {**CALL0, "call": 1, "keep": 2, "append": [12], "prompt_len": 12}
    _write(p, [BLOCKS_HEADER, c0, c1])
    a, b = read_trace(p).steps("a")
    assert len(a.prompt) == 11 and len(b.prompt) == 12
    assert np.array_equal(a.prompt[:8], b.prompt[:8])  # the kept blocks
    assert not np.array_equal(a.prompt[8:11], b.prompt[8:11])  # the tail was never hashed
    assert int(a.prompt.max()) < 100


def test_trace_package_is_pure() -> None:
    """The trace layer imports no network, subprocess or plotting modules (checked in a fresh
    interpreter, since other tests may have imported them)."""
    import subprocess
    import sys

    code = (
        "import sys, replay.trace, replay.trace.importers, replay.trace.synth\n"
        "bad = [m for m in ('httpx', 'aiohttp', 'subprocess', 'matplotlib', 'asyncio', 'socket')"
        " if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ""


@pytest.mark.parametrize(
    "call",
    [
        {"keep": 0, "append": [1, 2, 3], "output_len": 10**12},
        {"keep": 0, "append": [1], "prompt_len": 1, "output_len": 2**24 + 1},
    ],
)
def test_absurd_lengths_are_refused_before_anything_is_allocated(tmp_path: Path, call) -> None:
    # `replay run` on `output_len: 10**12` ended `failed (internal error: MemoryError)` after the
    # pool tried to build the forced output; the reader now refuses the line with its field.
    path = tmp_path / "t.jsonl"
    head = {"format": "replay-trace", "version": 1, "tokens": "ids", "vocab_size": 100}
    line = {"task": "a", "call": 0, "gap_s": 0, **call}
    path.write_bytes(orjson.dumps(head) + b"\n" + orjson.dumps(line) + b"\n")
    with pytest.raises(TraceError) as e:
        read_trace(path)
    assert (e.value.line, e.value.field) == (2, "output_len")
    assert "past any model's context" in e.value.why


@settings(max_examples=60, deadline=None)
@given(trace=traces(), batch_tokens=st.integers(1, 120))
def test_each_steps_output_is_its_calls_output_ids(trace: Trace, batch_tokens: int) -> None:
    """`steps` makes the stand-in outputs of a task's next calls together (a batch of up to
    `_OUTPUT_BATCH_TOKENS` ids); each step's output is still its own call's, recorded or not,
    wherever a batch ends."""
    import replay.trace.model as model

    saved = model._OUTPUT_BATCH_TOKENS
    model._OUTPUT_BATCH_TOKENS = batch_tokens
    try:
        for task in trace.task_ids:
            for step in trace.steps(task):
                assert np.array_equal(step.output, trace.output_ids(step.call))
                assert len(step.output) == step.call.output_len
    finally:
        model._OUTPUT_BATCH_TOKENS = saved


@pytest.mark.parametrize("field", ["after", "parent"])
def test_an_open_loop_call_with_a_dependency_is_refused(tmp_path: Path, field: str) -> None:
    """Every call has at_s, so each is sent at its time: an `after` or `parent` would be dropped
    without a word (validate said ok and the replay sent all three calls at 0 s)."""
    a0 = {**CALL0, "at_s": 0.0}
    b0 = {**CALL0, "task": "b", "at_s": 0.0}
    a1 = {**CALL1, "at_s": 0.0}
    if field == "after":
        a1["after"] = [["b", 0]]
    else:
        b0["parent"] = ["a", 0]
    p = tmp_path / "ol.jsonl"
    _write(p, [HEADER, a0, b0, a1])
    with pytest.raises(TraceError) as ei:
        read_trace_checked(p)  # what `replay trace validate` and every replay read
    assert ei.value.field == field and "open-loop" in ei.value.why
    assert ei.value.line == (4 if field == "after" else 3)
