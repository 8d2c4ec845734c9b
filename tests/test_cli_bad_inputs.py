"""No input reachable from the CLI ends in a Python traceback: a corpus of bad traces, bad
importer inputs and bad command-line arguments, each refused with exit 2 and one line saying
`FILE:LINE: field: why`, `FILE: key.path: why` or `replay: COMMAND: option: why`.

The cases are data: (name, files to write, argv, the pattern its one line must match). They run
in one interpreter through the real entry point (tests/cli_batch.py, as the console script does),
and a handful again as real `replay` subprocesses.
"""

from __future__ import annotations

import gzip
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import orjson
import pytest

from tests.cli_batch import run_one

ROOT = Path(__file__).resolve().parents[1]

Files = dict[str, bytes]


class Case(NamedTuple):
    name: str
    files: Files
    argv: list[str]
    pattern: str  # regex the single line of output must match (`replay: ` prefix optional)


def _lines(*objs: object) -> bytes:
    return b"".join((o if isinstance(o, bytes) else orjson.dumps(o)) + b"\n" for o in objs)


def _gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


# ------------------------------------------------------------------------------- v1 traces

HEAD = {"format": "replay-trace", "version": 1, "tokens": "ids", "vocab_size": 100}
BHEAD = {"format": "replay-trace", "version": 1, "tokens": "blocks", "vocab_size": 100,
         "block_size": 4}  # fmt: skip
C0 = {"task": "a", "call": 0, "gap_s": 0.0, "keep": 0, "append": [1, 2, 3], "output_len": 2}
C1 = {"task": "a", "call": 1, "gap_s": 1.0, "keep": 5, "append": [4], "output_len": 2}
B0 = {"task": "b", "call": 0, "gap_s": 0.0, "keep": 0, "append": [7], "output_len": 2}


def _trace(*calls: object, head: object = HEAD) -> Files:
    return {"t.jsonl": _lines(head, *calls)}


def _with(base: dict, **kw: object) -> dict:
    out = dict(base, **kw)
    return {k: v for k, v in out.items() if v is not _DROP}


_DROP = object()

# (name, files, FILE:LINE: field pattern)
BAD_TRACES: list[tuple[str, Files, str]] = [
    ("empty_file", {"t.jsonl": b""}, r"t\.jsonl:1: -: empty file"),
    ("not_json", {"t.jsonl": b"{not json\n"}, r"t\.jsonl:1: -: invalid JSON"),
    ("header_is_array", {"t.jsonl": b"[1]\n"}, r"t\.jsonl:1: -: line must be a JSON object"),
    ("format_wrong", _trace(C0, head=_with(HEAD, format="x")), r"t\.jsonl:1: format: "),
    ("version_2", _trace(C0, head=_with(HEAD, version=2)), r"t\.jsonl:1: version: "),
    ("vocab_1", _trace(C0, head=_with(HEAD, vocab_size=1)), r"t\.jsonl:1: vocab_size: "),
    ("vocab_true", _trace(C0, head=_with(HEAD, vocab_size=True)), r"t\.jsonl:1: vocab_size: "),
    ("tokens_bytes", _trace(C0, head=_with(HEAD, tokens="bytes")), r"t\.jsonl:1: tokens: "),
    ("header_unknown", _trace(C0, head=_with(HEAD, colour=1)), r"t\.jsonl:1: colour: unknown"),
    ("blocks_no_size", _trace(C0, head=_with(BHEAD, block_size=_DROP)), r":1: block_size: "),
    ("meta_list", _trace(C0, head=_with(HEAD, meta=[1])), r"t\.jsonl:1: meta: "),
    ("call_not_json", {"t.jsonl": _lines(HEAD) + b'{"task": \n'}, r"t\.jsonl:2: -: invalid JSON"),
    # orjson's own words counted lines of the one line it was given, and called Latin-1 text
    # a string with surrogates
    (
        "call_two_values",
        {"t.jsonl": _lines(HEAD) + b'{"task": "a"} x\n'},
        r"t\.jsonl:2: -: invalid JSON: unexpected content after document, column 15$",
    ),
    (
        "call_latin1",
        {"t.jsonl": _lines(HEAD) + b'{"task": "\xe9"}\n'},
        r"t\.jsonl:2: -: not UTF-8 text \(Latin-1 or UTF-16\?\); convert the file to UTF-8",
    ),
    (
        "call_gap_in_ms",
        _trace(_with(C0, gap_s=1_000_000_001)),
        r"t\.jsonl:2: gap_s: 1,000,000,001 s is more than 1,000,000,000 s",
    ),
    (
        "call_output_len_past_64_bits",
        {
            "t.jsonl": _lines(HEAD)
            + orjson.dumps(C0)[:-1].replace(b'"output_len":2', b'"output_len":' + b"9" * 32)
            + b"}\n"
        },
        r"t\.jsonl:2: output_len: must be an integer, got 1e\+32, past 64 bits",
    ),
    ("call_no_task", _trace(_with(C0, task=_DROP)), r"t\.jsonl:2: task: "),
    ("call_task_empty", _trace(_with(C0, task="")), r"t\.jsonl:2: task: .* got an empty one"),
    ("call_prompt_empty", _trace(_with(C0, append=[])), r"t\.jsonl:2: prompt_len: is 0: a call"),
    ("call_index_gap", _trace(_with(C0, call=1)), r"t\.jsonl:2: call: "),
    ("call_index_repeat", _trace(C0, _with(C1, call=0)), r"t\.jsonl:3: call: "),
    ("gap_negative", _trace(_with(C0, gap_s=-1)), r"t\.jsonl:2: gap_s: "),
    ("gap_string", _trace(_with(C0, gap_s="1")), r"t\.jsonl:2: gap_s: "),
    (
        "gap_nan",
        {"t.jsonl": _lines(HEAD) + b'{"task":"a","call":0,"gap_s":NaN}\n'},
        r"t\.jsonl:2: gap_s: must be a finite",
    ),
    ("keep_negative", _trace(_with(C0, keep=-1)), r"t\.jsonl:2: keep: "),
    ("keep_past_context", _trace(C0, _with(C1, keep=9)), r"t\.jsonl:3: keep: "),
    ("append_over_vocab", _trace(_with(C0, append=[1, 100])), r"t\.jsonl:2: append"),
    ("append_true", _trace(_with(C0, append=[1, True])), r"t\.jsonl:2: append"),
    ("append_ragged", _trace(_with(C0, append=[[1], 2])), r"t\.jsonl:2: append"),
    (
        "append_float",
        _trace(_with(C0, append=[1, 2.5])),
        r"t\.jsonl:2: append\[1\]: must be an integer, got 2\.5",
    ),
    (
        "append_string",
        _trace(_with(C0, append=[1, "x"])),
        r"t\.jsonl:2: append\[1\]: must be an integer, got 'x'",
    ),
    (
        "block_id_past_64_bits",
        {
            "t.jsonl": _lines(BHEAD)
            + b'{"task":"a","call":0,"gap_s":0,"keep":0,"append":[1,18446744073709551616],"prompt_len":8,"output_len":2}\n'
        },
        r"t\.jsonl:2: append\[1\]: 1\.84e\+19 does not fit in 64 bits",
    ),
    ("append_missing", _trace(_with(C0, append=_DROP)), r"t\.jsonl:2: append: "),
    ("prompt_len_wrong", _trace(_with(C0, prompt_len=9)), r"t\.jsonl:2: prompt_len: "),
    ("output_len_negative", _trace(_with(C0, output_len=-1)), r"t\.jsonl:2: output_len: "),
    ("output_len_vs_output", _trace(_with(C0, output=[1])), r"t\.jsonl:2: output_len: "),
    ("after_unknown", _trace(C0, _with(C1, after=[["z", 0]])), r"t\.jsonl:3: after: "),
    ("after_own_task", _trace(C0, _with(C1, after=[["a", 0]])), r"t\.jsonl:3: after: "),
    ("parent_on_call_1", _trace(B0, C0, _with(C1, parent=["b", 0])), r"t\.jsonl:4: parent: "),
    ("parent_unknown", _trace(_with(C0, parent=["z", 0])), r"t\.jsonl:2: parent: "),
    ("at_negative", _trace(_with(C0, at_s=-1)), r"t\.jsonl:2: at_s: "),
    ("tail_gap_not_last", _trace(_with(C0, tail_gap_s=1), C1), r"t\.jsonl:2: tail_gap_s: "),
    ("call_unknown_field", _trace(_with(C0, colour=1)), r"t\.jsonl:2: colour: unknown"),
    ("recorded_list", _trace(_with(C0, recorded=[1])), r"t\.jsonl:2: recorded: "),
    ("recorded_string", _trace(_with(C0, recorded={"start_s": "x"})), r":2: recorded\.start_s: "),
    (
        "dependency_cycle",
        _trace(C0, _with(C1, after=[["b", 0]]), _with(B0, after=[["a", 1]])),
        r"t\.jsonl:\d: after: dependency cycle",
    ),
    ("gzip_corrupt", {"t.jsonl.gz": _gz(_lines(HEAD, C0))[:30]}, r"t\.jsonl\.gz:\d+: -: "),
    ("blocks_do_not_fit", _trace(_with(C0, prompt_len=99), head=BHEAD), r":2: prompt_len: "),
    ("header_only", _trace(), r"t\.jsonl: -: a header and no call"),
    ("at_s_some", _trace(_with(C0, at_s=1.0), B0), r"t\.jsonl:3: at_s: 1 of 2 calls"),
    # ids are held as 32-bit integers: a larger vocabulary wrapped them silently
    (
        "vocab_past_32_bits",
        _trace(C0, head=_with(HEAD, vocab_size=10**10)),
        r"t\.jsonl:1: vocab_size: must be at most 2\^31",
    ),
    # what the stdlib reads and orjson refuses: later steps crashed on both
    (
        "task_lone_surrogate",
        {"t.jsonl": _lines(HEAD) + b'{"task":"\\ud800","call":0}\n'},
        r"t\.jsonl:2: -: invalid JSON",
    ),
    (
        "gap_past_a_double",
        {"t.jsonl": _lines(HEAD) + b'{"task":"a","call":0,"gap_s":1' + b"0" * 400 + b"}\n"},
        r"t\.jsonl:2: -: invalid JSON",
    ),
    (
        "meta_nan",
        {
            "t.jsonl": b'{"format":"replay-trace","version":1,"vocab_size":100,"meta":{"x":NaN}}\n'
            + _lines(C0)
        },
        r"t\.jsonl:1: meta\.x: NaN and Infinity are not JSON numbers",
    ),
]


def _trace_cases() -> list[Case]:
    cases = []
    for name, files, pattern in BAD_TRACES:
        path = next(iter(files))
        cases.append(Case(f"validate-{name}", files, ["trace", "validate", path], pattern))
    # the same reader guards stats and run: a sample through each (the last, a check beyond
    # the line reader, too)
    for name, files, pattern in BAD_TRACES[::5] + BAD_TRACES[-1:]:
        path = next(iter(files))
        cases.append(Case(f"stats-{name}", files, ["trace", "stats", path], pattern))
        run = ["run", "--trace", path, "--pool", "1", "--out", "out", "--engine", "sim"]
        cases.append(Case(f"run-{name}", files, run, pattern))
    return cases


# ------------------------------------------------------------------------------- importers

TL = {"task_id": "t", "start_time": 0, "end_time": 1, "prompt_token_ids": [1, 2],
      "generated_token_ids": [3]}  # fmt: skip
MC = {"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [1, 2]}
WREQ = {"t": 0, "in": 100, "out": 5, "hash_ids": [1], "api_time": 1.0, "think_time": 0.0}
WREQ2 = {"t": 5, "in": 130, "out": 5, "hash_ids": [1, 2], "api_time": 1.0, "think_time": 1.0}
WSUB = {"type": "subagent", "agent_id": "s", "t": 4, "duration_ms": 1000,
        "requests": [{"t": 0, "in": 100, "out": 5, "hash_ids": [9], "api_time": 0.5}]}  # fmt: skip


def _weka(*reqs: object, **head: object) -> Files:
    return {"c.json": orjson.dumps({"id": "c", "block_size": 64, "requests": list(reqs), **head})}


def _ea(*rows: object, head: object = None) -> Files:
    first = head if head is not None else {"instance_id": "t1"}
    return {"ea/t1.jsonl.gz": _gz(_lines(first, *rows))}


EA_ROW = {"seq": 0, "gap_before_s": 0, "prompt_shared": 0, "prompt_suffix": [1, 2],
          "prompt_len": 2, "output": [3]}  # fmt: skip

# (importer, name, files, source argument, pattern)
BAD_IMPORTS: list[tuple[str, str, Files, str, str]] = [
    ("tokenlog", "ragged_prompt", {"l.jsonl": _lines(_with(TL, prompt_token_ids=[[1, 2], [3]]))},
     "l.jsonl", r"l\.jsonl:1: prompt_token_ids\[0\]: is \[1,2\]; token ids are integers"),
    ("tokenlog", "true_token", {"l.jsonl": _lines(_with(TL, generated_token_ids=[1, True]))},
     "l.jsonl", r"l\.jsonl:1: generated_token_ids\[1\]: is true"),
    ("tokenlog", "negative_token", {"l.jsonl": _lines(_with(TL, prompt_token_ids=[-1]))},
     "l.jsonl", r"l\.jsonl:1: prompt_token_ids\[0\]: is -1"),
    ("tokenlog", "huge_token", {"l.jsonl": _lines(_with(TL, prompt_token_ids=[2**40]))},
     "l.jsonl", r"l\.jsonl:1: prompt_token_ids\[0\]: is 1099511627776"),
    ("tokenlog", "end_before_start", {"l.jsonl": _lines(_with(TL, end_time=-1))},
     "l.jsonl", r"l\.jsonl:1: end_time: "),
    ("tokenlog", "no_task", {"l.jsonl": _lines(_with(TL, task_id=_DROP))},
     "l.jsonl", r"l\.jsonl:1: task_id: missing"),
    ("tokenlog", "start_string", {"l.jsonl": _lines(_with(TL, start_time="0"))},
     "l.jsonl", r"l\.jsonl:1: start_time: has the wrong type"),
    ("tokenlog", "empty_log", {"l.jsonl": b"\n"}, "l.jsonl", r"l\.jsonl: -: no requests"),
    ("tokenlog", "bad_json", {"l.jsonl": b"{\n"}, "l.jsonl", r"l\.jsonl:1: -: invalid JSON"),
    ("tokenlog", "task_id_int_and_string",  # both would be task "5": two tasks merged
     {"l.jsonl": _lines(_with(TL, task_id=5), _with(TL, task_id="5", start_time=2, end_time=3))},
     "l.jsonl", r"l\.jsonl:2: task_id: task id '5' and 5 \(.*l\.jsonl line 1\) both name"),
    ("efficientagent", "ragged_suffix", _ea(_with(EA_ROW, prompt_suffix=[[1], [2, 3]])),
     "ea", r"ea/t1\.jsonl\.gz:2: prompt_suffix\[0\]: is \[1\]"),
    ("efficientagent", "true_in_output", _ea(_with(EA_ROW, output=[True])),
     "ea", r"ea/t1\.jsonl\.gz:2: output\[0\]: is true"),
    ("efficientagent", "no_header", _ea(EA_ROW, head={"seq": 0}),
     "ea", r"ea/t1\.jsonl\.gz:1: instance_id: missing"),
    ("efficientagent", "seq_not_increasing", _ea(EA_ROW, EA_ROW),
     "ea", r"ea/t1\.jsonl\.gz:3: seq: "),
    ("efficientagent", "gap_negative", _ea(_with(EA_ROW, gap_before_s=-1)),
     "ea", r"ea/t1\.jsonl\.gz:2: gap_before_s: "),
    ("efficientagent", "header_only", _ea(), "ea", r"ea/t1\.jsonl\.gz: -: task has a header"),
    ("efficientagent", "prompt_sha256_wrong", _ea(_with(EA_ROW, prompt_sha256="0" * 64)),
     "ea", r"ea/t1\.jsonl\.gz:2: prompt_sha256: 000000000000\.\.\. does not match the prompt"),
    ("efficientagent", "prompt_sha256_not_hex", _ea(_with(EA_ROW, prompt_sha256="abc")),
     "ea", r"ea/t1\.jsonl\.gz:2: prompt_sha256: is not 64 lower-case hex digits"),
    ("efficientagent", "file_not_in_manifest",  # imported with no digest, as if the release's
     {**_ea(EA_ROW), "ea/t2.jsonl.gz": _gz(_lines({"instance_id": "t2"}, EA_ROW)),
      "ea/trace_manifest.json": orjson.dumps({"files": [{"file": "t1.jsonl.gz"}]})},
     "ea", r"ea/t2\.jsonl\.gz: -: is not one of the task files trace_manifest\.json lists"),
    ("efficientagent", "manifest_schema", {**_ea(EA_ROW), "ea/trace_manifest.json": b'{"schema": "x"}'},
     "ea", r"ea/trace_manifest\.json: schema: is 'x'; this importer reads"),
    ("weka", "negative_t", _weka(_with(WREQ, t=-3), WREQ2),
     "c.json", r"c\.json: requests\[0\]\.t: is -3; must be a number >= 0"),
    ("weka", "negative_api_time", _weka(_with(WREQ, api_time=-3), WREQ2),
     "c.json", r"c\.json: requests\[0\]\.api_time: is -3; "),
    ("weka", "string_think_time", _weka(WREQ, _with(WREQ2, think_time="2")),
     "c.json", r"c\.json: requests\[1\]\.think_time: is '2'; "),
    ("weka", "negative_duration_ms", _weka(WREQ, _with(WSUB, duration_ms=-1e9), WREQ2),
     "c.json", r"c\.json: requests\[1\]\.duration_ms: is -1000000000\.0; "),
    ("weka", "unsorted_requests", _weka(WREQ2, WREQ),
     "c.json", r"c\.json: requests\[1\]\.t: starts before requests\[0\] .* time order"),
    ("weka", "duplicate_agent_id", _weka(WREQ, WSUB, _with(WSUB, t=4.5), WREQ2),
     "c.json", r"c\.json: requests\[2\]\.agent_id: 's' is also requests\[1\]'s; .* unique"),
    ("weka", "hash_ids_short", _weka(_with(WREQ, hash_ids=[])),
     "c.json", r"c\.json: requests\[0\]\.hash_ids: 0 blocks"),
    ("weka", "block_size_zero", _weka(WREQ, block_size=0), "c.json", r"c\.json: block_size: "),
    ("weka", "not_an_object", {"c.json": b"[]"}, "c.json", r"c\.json: -: a WEKA trace is one"),
    ("weka", "json_lines", {"c.json": _lines(MC, MC)},  # a Mooncake file given as WEKA
     "c.json", r"c\.json:2: -: invalid JSON: .*; more than one JSON value: a JSON Lines file\?"),
    ("mooncake", "empty_file", {"m.jsonl": b""}, "m.jsonl", r"m\.jsonl: -: no requests"),
    ("mooncake", "timestamp_negative", {"m.jsonl": _lines(_with(MC, timestamp=-1))},
     "m.jsonl", r"m\.jsonl:1: timestamp: "),
    ("mooncake", "hash_ids_strings", {"m.jsonl": _lines(_with(MC, hash_ids=["a", "b"]))},
     "m.jsonl", r"m\.jsonl:1: hash_ids\[0\]: is 'a'; block hash ids are integers"),
    ("mooncake", "blocks_do_not_cover", {"m.jsonl": _lines(_with(MC, input_length=5000))},
     "m.jsonl", r"m\.jsonl:1: hash_ids: 2 blocks do not cover 5000"),
    # imports whose result the reader refuses: nothing is written (they exited 0 before)
    # lengths the reader refuses, named where they were read (they named the unwritten output)
    ("weka", "prompt_past_any_context",
     _weka({**WREQ, "in": 20_000_000, "hash_ids": list(range(20))}, block_size=1 << 20),
     "c.json", r"c\.json: requests\[0\]\.in: 20,000,000 tokens is past any model's context"),
    ("mooncake", "output_past_any_context", {"m.jsonl": _lines(_with(MC, output_length=20_000_000))},
     "m.jsonl", r"m\.jsonl:1: output_length: 20,000,000 tokens is past"),
    ("mooncake", "empty_prompt", {"m.jsonl": _lines(_with(MC, input_length=0, hash_ids=[]))},
     "m.jsonl", r"m\.jsonl:1: input_length: is 0: a call sends at least one prompt token"),
    ("tokenlog", "empty_prompt", {"l.jsonl": _lines(_with(TL, prompt_token_ids=[]))},
     "l.jsonl", r"l\.jsonl:1: prompt_token_ids: is 0: a call sends at least one"),
    ("weka", "think_time_in_ms", _weka(WREQ, _with(WREQ2, think_time=2e9)),
     "c.json", r"o\.jsonl:3: gap_s: 2,000,000,000 s .* \(not written: "),
    ("tokenlog", "empty_task_id", {"l.jsonl": _lines(_with(TL, task_id=""))},
     "l.jsonl", r"o\.jsonl:2: task: must be a non-empty string"),
    ("weka", "task_name_clash",  # c's sub-agent s is task c/s, which d.json names itself
     {"w/c.json": _weka(WREQ, WSUB, WREQ2)["c.json"],
      "w/d.json": orjson.dumps({"id": "c/s", "block_size": 64, "requests": [WREQ, WREQ2]})},
     "w", r"w/d\.json: id: its task 'c/s' is also a task of w/c\.json"),
]  # fmt: skip


def _import_cases() -> list[Case]:
    return [
        Case(f"import-{kind}-{name}", files, ["trace", "import", "--from", kind, src, "-o", "o.jsonl"],
             pattern)
        for kind, name, files, src, pattern in BAD_IMPORTS
    ]  # fmt: skip


# --------------------------------------------------------------------- command-line arguments

GOOD = {"t.jsonl": _lines(HEAD, C0, C1), "c.json": _weka(WREQ, WREQ2)["c.json"]}
SESSIONS = ["predict", "--sessions", "--model", "llama-3-70b", "--hardware", "explainer-4xa100",
            "--session-tokens", "100000", "--device-gib", "1"]  # fmt: skip
RUN = ["run", "--trace", "t.jsonl", "--pool", "1", "--out", "out"]
SIM = [*RUN, "--engine", "sim"]
BAD_ARGS: list[tuple[str, list[str], str]] = [
    ("import_out_empty", ["trace", "import", "--from", "weka", "c.json", "-o", ""],
     r"trace import: -o: is empty"),
    ("import_out_proc", ["trace", "import", "--from", "weka", "c.json", "-o", "/proc/x"],
     r"trace import: -o: cannot write '/proc/x': "),
    ("import_out_dir", ["trace", "import", "--from", "weka", "c.json", "-o", "."],
     r"trace import: Invalid value for '-o' / '--out': .* is a directory"),
    ("import_vocab_flag_too_small",  # blamed on the manifest, by its bare name
     ["trace", "import", "--from", "efficientagent", str(ROOT / "tests/fixtures/efficientagent"),
      "--vocab-size", "5", "-o", "o.jsonl"],
     r"trace import: --vocab-size: 5 does not cover token id \d+"),
    ("import_unknown_kind", ["trace", "import", "--from", "x", "c.json", "-o", "o.jsonl"],
     r"trace import: Invalid value for '--from'"),
    ("import_missing_source", ["trace", "import", "--from", "weka", "nope.json", "-o", "o.jsonl"],
     r"trace import: Invalid value for 'SRC\.\.\.': Path 'nope\.json' does not exist"),
    ("synth_out_proc", ["trace", "synth", "--preset", "swe-agent", "--tasks", "1", "-o",
                        "/proc/x"], r"trace synth: -o: cannot write"),
    ("fold_out_empty", ["trace", "fold", "t.jsonl", "-o", ""], r"trace fold: -o: is empty"),
    # an output that would replace an input (read whole, then written: only the output is left)
    ("import_out_is_source", ["trace", "import", "--from", "weka", "c.json", "-o", "./c.json"],
     r"trace import: -o: '\./c\.json' is the source file 'c\.json': .* give another output file"),
    ("import_out_in_source_dir", ["trace", "import", "--from", "weka", ".", "-o", "o.jsonl"],
     r"trace import: -o: 'o\.jsonl' is inside the source directory '\.'; write it elsewhere"),
    ("scale_out_is_source", ["trace", "scale", "t.jsonl", "-o", "t.jsonl", "--tokens", "1/2"],
     r"trace scale: -o: 't\.jsonl' is the source file"),
    ("slice_out_is_source", ["trace", "slice", "t.jsonl", "-o", "t.jsonl", "--tasks", "1"],
     r"trace slice: -o: 't\.jsonl' is the source file"),
    ("merge_out_is_source", ["trace", "merge", "c.json", "t.jsonl", "-o", "t.jsonl"],
     r"trace merge: -o: 't\.jsonl' is the source file 't\.jsonl'"),
    ("fold_out_is_source", ["trace", "fold", "t.jsonl", "-o", "t.jsonl"],
     r"trace fold: -o: 't\.jsonl' is the source file"),
    ("validate_missing", ["trace", "validate", "nope.jsonl"], r"nope\.jsonl: -: cannot open"),
    ("run_url_ipv6_open", [*RUN, "--url", "http://[::1"],
     r"run: --url: 'http://\[::1' is not a valid URL"),
    ("run_url_port", [*RUN, "--url", "http://h:99999"], r"run: --url: .* not a valid URL"),
    ("run_url_no_host", [*RUN, "--url", "http://"], r"run: --url: 'http://' names no host"),
    ("run_url_scheme", [*RUN, "--url", "ftp://x"], r"run: --url: "),
    # nan busy-looped the scraper into a traceback, inf overflowed its timer
    ("run_scrape_nan", [*SIM, "--scrape-interval-s", "nan"],
     r"run: --scrape-interval-s: must be a finite number > 0 seconds, got nan"),
    ("run_scrape_inf", [*SIM, "--scrape-interval-s", "inf"],
     r"run: --scrape-interval-s: must be a finite number > 0 seconds, got inf"),
    # taken and ignored: the in-process simulator has no HTTP (a timeout never timed a call out)
    ("run_sim_request_timeout", [*SIM, "--request-timeout-s", "5", "--transport", "httpx"],
     r"run: --transport, --request-timeout-s: apply to a server \(--url URL\)"),
    ("run_pool_word", ["run", "--trace", "t.jsonl", "--pool", "two", "--out", "o", "--engine",
                       "sim"], r"run: Invalid value for '--pool'"),
    ("run_out_proc", ["run", "--trace", "t.jsonl", "--pool", "1", "--out", "/proc/x/y",
                      "--engine", "sim"], r"/proc/x/y: --out: cannot create: No such file or directory"),
    ("run_no_target", RUN, r"run: --url/--engine: give exactly one"),
    # taken and ignored in process: the opposite mistake was already refused
    ("run_sim_engine_kind", [*SIM, "--engine-kind", "vllm"],
     r"run: --engine-kind: server options need --url URL"),
    ("run_sim_served_model", [*SIM, "--served-model", "m"],
     r"run: --served-model: server options need --url URL"),
    ("unknown_command", ["bogus"], r"No such command 'bogus'"),
    # numbers
    ("run_pool_0", [*SIM[:4], "0", *SIM[5:]], r"run: --pool: must be an integer >= 1"),
    ("run_gap_scale_nan", [*SIM, "--gap-scale", "nan"], r"run: --gap-scale: must be in \[0, 1e\+06\], got nan"),
    ("run_timeout_negative", [*RUN, "--url", "http://127.0.0.1:9", "--request-timeout-s", "-5"],
     r"run: --request-timeout-s: must be > 0"),
    ("run_max_rps_0", [*RUN, "--url", "http://127.0.0.1:9", "--max-rps", "0"],
     r"run: --max-rps: must be > 0"),
    ("run_truncate_0", [*SIM, "--truncate-prompt-tokens", "0"],
     r"run: --truncate-prompt-tokens: must be >= 1"),
    ("run_device_nan", [*SIM, "--device-kv-gib", "nan"],
     r"sim options: --device-kv-gib: must be in \[0, 1,048,576\] GiB, got nan"),
    ("run_host_tier_inf", [*SIM, "--host-tier-gib", "inf"],
     r"sim options: --host-tier-gib: must be in \[0, 1,048,576\] GiB, got inf"),
    ("run_device_huge", [*SIM, "--device-kv-gib", "1e300"],
     r"sim options: --device-kv-gib: must be in \[0, 1,048,576\] GiB, got 1e\+300"),
    ("run_step_overhead_negative", [*SIM, "--step-overhead-s", "-1"],
     r"sim options: --step-overhead-s: must be a finite number >= 0"),
    ("run_time_scale_sim", [*SIM, "--time-scale", "5"],  # recorded in run.json and ignored
     r"run: --time-scale: paces `replay sim serve` in wall time; --engine sim runs in virtual"),
    ("run_time_scale_nan", [*SIM, "--time-scale", "nan"],
     r"sim options: --time-scale: must be a finite number >= 0, got nan"),
    ("run_sim_seed_negative", [*SIM, "--jitter", "0.05", "--seed", "-1"],
     r"sim options: --seed: must be an integer >= 0, got -1"),
    ("sim_serve_seed_negative", ["sim", "serve", "--port", "0", "--seed", "-1"],
     r"sim options: --seed: must be an integer >= 0, got -1"),
    ("synth_seed_negative", ["trace", "synth", "--preset", "swe-agent", "--tasks", "2", "--seed",
                             "-1", "-o", "x.jsonl"], r"synth: seed: must be in \[0, 2\^63 - 1\], got -1"),
    ("synth_seed_past_64_bits", ["trace", "synth", "--preset", "swe-agent", "--tasks", "1",
                                 "--seed", str(10**23), "-o", "x.jsonl"],
     r"synth: seed: must be in \[0, 2\^63 - 1\]"),  # it failed after the work, naming `meta`
    ("synth_tasks_huge", ["trace", "synth", "--preset", "swe-agent", "--tasks", str(10**11),
                          "-o", "x.jsonl"], r"synth: tasks: must be at most 10,000"),
    ("predict_tier_huge", ["predict", "--trace", "t.jsonl", "--pool", "1", "--model",
                           "qwen3-coder-30b-a3b", "--tiers-gib", "0,1e300"],
     r"predict: Invalid value for --tiers-gib: tier sizes must be in \[0, 1,048,576\] GiB"),
    ("predict_tier_nan", ["predict", "--trace", "t.jsonl", "--pool", "1", "--model",
                          "qwen3-coder-30b-a3b", "--tiers-gib", "1,nan"],
     r"predict: Invalid value for --tiers-gib: nan is not a number"),
    ("scale_time_past_bounds", ["trace", "scale", "t.jsonl", "-o", "s.jsonl", "--tokens", "1/2",
                                "--time", "1e10"],
     r"scale: time: x1e\+10 makes a call 1's gap_s 1e\+10 s, past the trace format's 1e\+09 s"),
    ("predict_out_is_trace", ["predict", "--trace", "t.jsonl", "--pool", "1", "--model",
                              "qwen3-coder-30b-a3b", "-o", "./t.jsonl"],
     r"predict: -o: '\./t\.jsonl' is the trace: writing it would replace it"),
    ("predict_tp_0", ["predict", "--trace", "t.jsonl", "--pool", "1", "--model",
                      "qwen3-coder-30b-a3b", "--tp", "0"], r"^predict: Invalid value for '--tp': 0"),
    ("predict_economics_tp_0", ["predict", "--economics", "--model", "qwen3-coder-30b-a3b",
                                "--tp", "0"], r"^predict: Invalid value for '--tp': 0"),
    ("predict_bytes_nan", ["predict", "--trace", "t.jsonl", "--pool", "1", "--bytes-per-token",
                           "nan"], r"^predict: --bytes-per-token: must be a finite number > 0, got nan"),
    ("predict_efficiency_0", ["predict", "--economics", "--model", "qwen3-coder-30b-a3b",
                              "--efficiency", "0"], r"^predict: --efficiency: must be in \(0, 1\], got 0\.0"),
    # --sessions: a host tier of nan or inf was a traceback, no sessions printed a bare header
    ("predict_sessions_host_nan", [*SESSIONS, "--host-gib", "nan"],
     r"^predict: Invalid value for --host-gib: tier sizes must be in \[0, "),
    ("predict_sessions_host_inf", [*SESSIONS, "--host-gib", "inf"],
     r"^predict: Invalid value for --host-gib: tier sizes must be in \[0, "),
    ("predict_sessions_none", [*SESSIONS, "--max-sessions", "0"],
     r"^predict: Invalid value for '--max-sessions': 0 is not in the range 1<=x<=10000"),
    # ran for minutes and took tens of GB, one session count at a time
    ("predict_sessions_too_many", [*SESSIONS, "--max-sessions", "100000000"],
     r"^predict: Invalid value for '--max-sessions': 100000000 is not in the range 1<=x<=10000"),
    ("predict_sessions_tokens_negative", [*SESSIONS[:-4], "--session-tokens", "-5", "--device-gib", "1"],
     r"^predict: Invalid value for '--session-tokens': -5 is not in the range 1<=x<="),
    # predict: a number past 64 bits, or a count past them, ended in a traceback
    ("predict_prefix_huge", ["predict", "--economics", "--model", "qwen3-coder-30b-a3b", "--tp",
                             "8", "--hardware", "h20", "--prefix-tokens", str(10**20)],
     r"^predict: Invalid value for --prefix-tokens: values must be at most 16,777,216"),
    ("predict_pool_huge", ["predict", "--closed-form", "--pool", str(10**20), "--mean-prompt-tokens",
                           "1000", "--bytes-per-token", "100", "--json"],
     r"^predict: Invalid value for '--pool': 1000+ is not in the range 1<=x<=1048576"),
    ("predict_tp_huge", ["predict", "--economics", "--model", "qwen3-coder-30b-a3b", "--tp",
                         str(10**20)], r"^predict: Invalid value for '--tp': 1000+ is not in the range"),
    ("predict_device_tokens_huge", ["predict", "--trace", "t.jsonl", "--pool", "1", "--model",
                                    "qwen3-coder-30b-a3b", "--device-tokens", str(10**20)],
     r"^predict: Invalid value for '--device-tokens': 1000+ is not in the range 0<=x<="),
    ("predict_chunk_tokens_huge", ["predict", "--trace", "t.jsonl", "--pool", "1", "--model",
                                   "qwen3-coder-30b-a3b", "--chunk-tokens", str(10**20)],
     r"^predict: Invalid value for '--chunk-tokens': 1000+ is not in the range 1<=x<="),
    ("predict_session_tokens_huge", [*SESSIONS[:-4], "--session-tokens", str(10**20)],
     r"^predict: Invalid value for '--session-tokens': 1000+ is not in the range 1<=x<="),
    ("predict_bytes_tiny_device", ["predict", "--trace", "t.jsonl", "--pool", "1",
                                   "--bytes-per-token", "1e-300", "--device-gib", "1",
                                   "--tiers-gib", "0"],
     r"^predict: --bytes-per-token: 1e-300 bytes a token puts inf tokens in 1 GiB, past the "
     r"model's 64-bit counts"),
    ("predict_bytes_tiny_tier", ["predict", "--trace", "t.jsonl", "--pool", "1",
                                 "--bytes-per-token", "1e-300", "--tiers-gib", "2"],
     r"^predict: --bytes-per-token: 1e-300 bytes a token puts inf tokens in 2 GiB"),
    ("predict_bytes_huge", ["predict", "--closed-form", "--pool", "4", "--mean-prompt-tokens", "1000",
                            "--bytes-per-token", "1e300"],
     r"^predict: --bytes-per-token: must be at most 1,073,741,824, got 1e\+300"),
    ("predict_mean_huge", ["predict", "--closed-form", "--pool", "4", "--mean-prompt-tokens", "1e300",
                           "--bytes-per-token", "1"],
     r"^predict: --mean-prompt-tokens: must be at most 16,777,216, got 1e\+300"),
    ("predict_mean_inf", ["predict", "--closed-form", "--pool", "4", "--mean-prompt-tokens", "inf",
                          "--bytes-per-token", "1000"], r"^predict: --mean-prompt-tokens: must be a finite"),
    ("predict_device_inf", ["predict", "--trace", "t.jsonl", "--pool", "1", "--model",
                            "qwen3-coder-30b-a3b", "--device-gib", "inf"],
     r"predict: Invalid value for --device-gib: tier sizes must be in"),
    # predict: one mode, and no option that mode (or order) would ignore
    ("predict_two_modes", ["predict", "--closed-form", "--economics", "--model",
                           "qwen3-coder-30b-a3b"],
     r"^predict: --closed-form and --economics: give one mode"),
    ("predict_option_of_other_mode", ["predict", "--economics", "--model", "qwen3-coder-30b-a3b",
                                      "--pool", "3"],
     r"^predict: --pool: not read by --economics predictions; it is for --trace or --closed-form"),
    ("predict_sessions_device_tokens", ["predict", "--sessions", "--model", "llama-3-70b",
                                        "--hardware", "explainer-4xa100", "--session-tokens",
                                        "1000", "--device-tokens", "5"],
     r"^predict: --device-tokens: not read by --sessions predictions"),
    ("predict_queue_trace_order", ["predict", "--trace", "t.jsonl", "--pool", "1", "--model",
                                   "qwen3-coder-30b-a3b", "--order", "trace", "--queue"],
     r"^predict: --queue: applies to --order pool"),
    ("predict_efficiency_no_hardware", ["predict", "--trace", "t.jsonl", "--pool", "1", "--model",
                                        "qwen3-coder-30b-a3b", "--efficiency", "0.5"],
     r"^predict: --efficiency: scales the service times --hardware gives"),
    ("predict_hardware_run_order", ["predict", "--trace", "t.jsonl", "--pool", "1", "--model",
                                    "qwen3-coder-30b-a3b", "--order", "run:x", "--hardware", "h20"],
     r"^predict: --hardware: applies to --order pool"),
    ("run_device_tiny", [*SIM, "--device-kv-gib", "0"],
     r"sim options: --device-kv-gib: holds less than one KV block"),
    ("run_transport", [*RUN, "--url", "http://127.0.0.1:9", "--transport", "pigeon"],
     r"run: Invalid value for '--transport'"),
    ("synth_tasks_negative", ["trace", "synth", "--preset", "swe-agent", "--tasks", "-1", "-o",
                              "x.jsonl"], r"synth: tasks: must be positive"),
    ("synth_scale_nan", ["trace", "synth", "--preset", "swe-agent", "--scale", "nan", "-o",
                         "x.jsonl"], r"synth: scale: must be a positive number, got nan"),
    ("fold_keep_head_negative", ["trace", "fold", "t.jsonl", "-o", "f.jsonl", "--keep-head-tokens",
                                 "-1"], r"fold: keep_head_tokens: must be >= 0, got -1"),
    ("slice_max_calls_0", ["trace", "slice", "t.jsonl", "-o", "s.jsonl", "--max-calls-per-task",
                           "0"], r"slice: --max-calls-per-task: must be >= 1, got 0"),
    ("fold_fraction_2", ["trace", "fold", "t.jsonl", "-o", "f.jsonl", "--fold-fraction", "2"],
     r"fold: fold_fraction: must be in \(0, 1\]"),
    ("predict_tiers_words", ["predict", "--trace", "t.jsonl", "--pool", "1", "--model",
                             "qwen3-coder-30b-a3b", "--tiers-gib", "a,b"],
     r"predict: Invalid value for --tiers-gib"),
    ("predict_unknown_model", ["predict", "--trace", "t.jsonl", "--pool", "1", "--model", "x"],
     r"model: unknown model 'x'"),
    ("sim_serve_port", ["sim", "serve", "--port", "70000"], r"port: must be in 0\.\.65535"),
    ("report_missing_dir", ["report", "nope"], r"nope: -: no such results directory"),
    # predict: an option silently dropped, or checked only after the trace was read (nope.jsonl
    # is not there: the trace's error came first, or the option was named `pool:`)
    ("predict_trace_and_mean", ["predict", "--closed-form", "--pool", "4", "--trace", "nope.jsonl",
                                "--mean-prompt-tokens", "100", "--bytes-per-token", "1"],
     r"^predict: --trace and --mean-prompt-tokens: both give the closed form's mean prompt"),
    ("predict_device_gib_and_tokens", ["predict", "--trace", "t.jsonl", "--pool", "1",
                                       "--bytes-per-token", "1", "--device-gib", "10",
                                       "--device-tokens", "0"],
     r"^predict: --device-gib and --device-tokens: both size the device"),
    ("predict_pool_0_first", ["predict", "--trace", "nope.jsonl", "--pool", "0",
                              "--bytes-per-token", "1"], r"^predict: Invalid value for '--pool': 0 "),
    ("predict_pool_negative_first", ["predict", "--trace", "nope.jsonl", "--pool", "-1",
                                     "--bytes-per-token", "1"],
     r"^predict: Invalid value for '--pool': -1 "),
    ("predict_device_tokens_negative_first", ["predict", "--trace", "nope.jsonl", "--pool", "1",
                                              "--bytes-per-token", "1", "--device-tokens", "-5"],
     r"^predict: Invalid value for '--device-tokens': -5 "),
    ("predict_order_run_empty", ["predict", "--trace", "t.jsonl", "--pool", "1", "--model",
                                 "qwen3-coder-30b-a3b", "--order", "run:"],
     r"^predict: --order: 'run:' names no run directory: give run:DIR"),
    ("predict_order_typo", ["predict", "--trace", "t.jsonl", "--pool", "1", "--model",
                            "qwen3-coder-30b-a3b", "--order", "pol"],
     r"^predict: --order: unknown order 'pol'; valid: pool, trace, run:DIR$"),
    ("compare_a_file", ["compare", "t.jsonl", "t.jsonl"], r"t\.jsonl: -: a file, not a results"),
]  # fmt: skip


def _arg_cases() -> list[Case]:
    return [Case(f"args-{name}", GOOD, argv, pattern) for name, argv, pattern in BAD_ARGS]


def _transform_cases() -> list[Case]:
    """A transform's input gets every check validate makes: slice, scale and merge read
    arrival times out of order (which read_trace alone lets through) and wrote them out."""
    back = _trace(_with(C0, at_s=5.0), _with(C1, at_s=2.0))
    pattern = r"t\.jsonl:3: at_s: task 'a': call 1 arrives before call 0"
    argvs = {
        "slice": ["trace", "slice", "t.jsonl", "-o", "o.jsonl", "--tasks", "1"],
        "scale": ["trace", "scale", "t.jsonl", "-o", "o.jsonl", "--tokens", "1/2"],
        "merge": ["trace", "merge", "t.jsonl", "t.jsonl", "-o", "o.jsonl"],
    }
    return [Case(f"{cmd}-arrivals_backwards", back, argv, pattern) for cmd, argv in argvs.items()]


CASES = _trace_cases() + _import_cases() + _arg_cases() + _transform_cases()


# ----------------------------------------------------------------------------------- runner


def _prepare(case: Case, base: Path) -> Path:
    d = base / case.name
    for rel, data in case.files.items():
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    d.mkdir(parents=True, exist_ok=True)
    return d


def _check(case: Case, code: int, out: str, err: str) -> None:
    text = (out + err).strip()
    shown = f"{case.name}: exit {code}\n{text}"
    assert "Traceback" not in text, shown
    assert code == 2, shown
    assert text.count("\n") == 0, shown
    line = text.removeprefix("replay: ")
    assert re.search(case.pattern, line), f"{shown}\n  does not match {case.pattern!r}"


def test_the_corpus_is_large_and_every_name_is_unique():
    assert len(CASES) >= 60
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.fixture(scope="module")
def batch_results(tmp_path_factory) -> dict[str, dict]:
    base = tmp_path_factory.mktemp("corpus")
    jobs = [{"cwd": str(_prepare(c, base)), "argv": c.argv} for c in CASES]
    cp = subprocess.run(
        [sys.executable, "-m", "tests.cli_batch"],
        input=orjson.dumps(jobs),
        capture_output=True,
        cwd=ROOT,
        timeout=300,
    )
    assert cp.returncode == 0, cp.stderr.decode()
    results = orjson.loads(cp.stdout)
    return {c.name: r for c, r in zip(CASES, results, strict=True)}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_bad_input_is_one_line_and_exit_2(case: Case, batch_results):
    r = batch_results[case.name]
    _check(case, r["code"], r["out"], r["err"])


# A few through the console script itself, in their own processes (no shared interpreter state).
REAL_PROCESS = [
    "import-tokenlog-ragged_prompt",
    "import-weka-duplicate_agent_id",
    "import-mooncake-empty_file",
    "args-run_url_ipv6_open",
    "args-import_out_proc",
    "validate-append_true",
    "run-empty_file",
]


@pytest.mark.parametrize("name", REAL_PROCESS)
def test_real_replay_process(name: str, tmp_path):
    case = next(c for c in CASES if c.name == name)
    d = _prepare(case, tmp_path)
    replay = Path(sys.executable).with_name("replay")
    argv: list[str] = (
        [str(replay)] if replay.exists() else [sys.executable, "-m", "replay.cli.main"]
    )
    cp = subprocess.run([*argv, *case.argv], capture_output=True, text=True, cwd=d, timeout=120)
    _check(case, cp.returncode, cp.stdout, cp.stderr)


@pytest.mark.parametrize("name", [n for n, _, _ in BAD_ARGS if "_out_is_source" in n])
def test_an_output_that_is_an_input_leaves_the_input_as_it_was(name: str, tmp_path):
    case = next(c for c in CASES if c.name == f"args-{name}")
    d = _prepare(case, tmp_path)
    r = run_one(str(d), case.argv)
    _check(case, r["code"], r["out"], r["err"])
    for rel, data in case.files.items():
        assert (d / rel).read_bytes() == data, rel


def test_an_output_that_is_a_fifo_or_a_link_is_left_as_it_was(tmp_path):
    """`-o` is written by renaming a temporary file onto it: a device (`-o /dev/null`), a FIFO or
    a symbolic link became a plain file, and the command said it had written it."""
    import os

    trace = str(ROOT / "traces/swe-agent-small.jsonl.gz")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    aim = tmp_path / "aim.jsonl.gz"
    aim.write_bytes(b"kept")
    link = tmp_path / "link.jsonl.gz"
    link.symlink_to(aim)
    commands = [
        (["trace", "slice", trace, "--tasks", "1", "-o"], "trace slice: -o"),
        (["predict", "--trace", trace, "-o"], "predict: -o"),
    ]
    for argv, where in commands:
        for out, why in ((fifo, "not a regular file"), (link, "is a symbolic link")):
            r = run_one(str(tmp_path), [*argv, str(out)])
            assert r["code"] == 2 and where in r["err"] and why in r["err"], r
    assert fifo.is_fifo() and link.is_symlink() and aim.read_bytes() == b"kept"


def test_a_full_disk_under_a_trace_output_is_the_machines_fault_exit_1(
    tmp_path, monkeypatch, capsys
):
    # main() documents exit 1 for a full disk; the trace commands said 2, as for bad input
    import errno

    import replay.trace.io as trace_io
    from replay.cli.main import main

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(trace_io, "write_trace", full)
    out = tmp_path / "t.jsonl.gz"
    with pytest.raises(SystemExit) as e:
        main(
            [
                "trace",
                "synth",
                "--preset",
                "swe-agent",
                "--tasks",
                "2",
                "--seed",
                "1",
                "-o",
                str(out),
            ]
        )
    err = capsys.readouterr().err
    assert e.value.code == 1 and "No space left on device" in err and "-o" in err, err
