"""Id arrays parsed by numpy while reading a trace: the same calls and the same errors as the
JSON parser's lists. The oracle for each line is the same object written with spaces after the
commas (`json.dumps`), a form the numpy path leaves to orjson."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import orjson
import pytest

from replay.errors import TraceError
from replay.trace.fields import json_error
from replay.trace.id_arrays import cut_ids
from replay.trace.io import read_trace

HEADER = b'{"format":"replay-trace","version":1,"tokens":"ids","vocab_size":1000}'
BLOCKS = b'{"format":"replay-trace","version":1,"tokens":"blocks","block_size":4,"vocab_size":9}'
CALL = b'{"task":"a","call":0,"gap_s":0.0,"keep":0,"append":%s,"output_len":2}'


def _read(path: Path, header: bytes, line: bytes, spaced: bool):
    """The trace's calls as plain data, or its error as (line, field, why)."""
    if spaced:
        line = json.dumps(json.loads(line)).encode()
        assert cut_ids(line, "append") is None  # the oracle takes the list path
    path.write_bytes(header + b"\n" + line + b"\n")
    try:
        calls = read_trace(path).calls
    except TraceError as e:
        return (e.line, e.field, e.why)
    return [(c.append.dtype, c.append.tolist(), None if c.output is None else c.output.tolist(),
             c.prompt_len, c.output_len) for c in calls]  # fmt: skip


@pytest.mark.parametrize(
    "line",
    [CALL % b"[1,2,3]", CALL % b"[0]", CALL % b"[0,10,0,999]", CALL % b"[999,1000]",
     CALL % b"[1,true]", CALL % b"[1,2.5]", CALL % b"[12345678901234567890123]",
     CALL % b"[9223372036854775807]", CALL % b'["1"]', CALL % b"[[1]]",
     CALL % b"[1,2]" + b'"', b'{"task":"a","call":0,"gap_s":0.0,"keep":0,"append":[5],'
     b'"output":[1,2],"recorded":{"append":3}}',
     b'{"task":"a","call":0,"gap_s":0,"keep":0,"output":[7,8],"append":[1],"output_len":3}',
     b'{"task":"a","call":0,"gap_s":0,"keep":0,"append":[1],"append":[2,3],"output_len":1}',
     b'{"task":"a","call":0,"gap_s":0,"keep":0,"recorded":{"append":[1]},"output_len":1}',
     b'{"task":"a\\"append\\":[1]","call":0,"gap_s":0,"keep":0,"append":[4],"output_len":1}'],
)  # fmt: skip
def test_ids_trace_same_calls_and_errors_as_json_lists(tmp_path, line):
    if line.endswith(b'"'):  # not JSON at all: the error is orjson's on the line as written
        with pytest.raises(orjson.JSONDecodeError) as e:
            orjson.loads(line)
        assert _read(tmp_path / "t.jsonl", HEADER, line, False) == (
            2,
            None,
            json_error(e.value),
        )
        return
    got = _read(tmp_path / "t.jsonl", HEADER, line, False)
    assert got == _read(tmp_path / "t.jsonl", HEADER, line, True)


@pytest.mark.parametrize("ids", [b"[5,9223372036854775806]", b"[9223372036854775808]", b"[0,7]"])
def test_blocks_trace_same_calls_and_errors_as_json_lists(tmp_path, ids):
    line = b'{"task":"a","call":0,"gap_s":0,"keep":0,"append":%s,"prompt_len":7,"output_len":1}'
    fast = _read(tmp_path / "t.jsonl", BLOCKS, line % ids, False)
    assert fast == _read(tmp_path / "t.jsonl", BLOCKS, line % ids, True)
    if ids == b"[0,7]":
        assert fast[0][:2] == (np.int64, [0, 7])


@pytest.mark.parametrize("body", [b"[01]", b"[1,01]", b"[1,,2]", b"[1,]", b"[,1]", b"[-1]"])
def test_not_json_or_signed_is_left_to_the_json_parser(tmp_path, body):
    line = CALL % body
    assert cut_ids(line, "append") is None
    try:
        want = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        assert _read(tmp_path / "t.jsonl", HEADER, line, False) == (2, None, json_error(e))
        return
    assert want["append"] == [-1]
    assert _read(tmp_path / "t.jsonl", HEADER, line, False)[2] == (
        "token id -1 outside vocab_size 1000 (0..999)"
    )


def test_plain_array_is_cut_and_parsed():
    ids = np.random.default_rng(0).integers(0, 150_000, 50_000)
    line = CALL % orjson.dumps(ids, option=orjson.OPT_SERIALIZE_NUMPY)
    rest, got = cut_ids(line, "append")  # type: ignore[misc]
    assert got.dtype == np.int64 and np.array_equal(got, ids)
    assert orjson.loads(rest)["append"] == "\x00ids"
