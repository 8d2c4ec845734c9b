"""Importers against the real traces in ../shared/traces and fixtures in tests/fixtures."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from pathlib import Path

import numpy as np
import orjson
import pytest

from replay.errors import ConfigError, TraceError
from replay.trace.importers import import_trace
from replay.trace.importers.efficientagent import prompt_sha256
from replay.trace.io import read_trace, write_trace
from replay.trace.model import Trace
from replay.trace.schedule import MAX_AT_S, is_open_loop
from replay.trace.stats import trace_stats
from tests.make_efficientagent_fixture import fixture_trace, write_fixture
from tests.open_counter import opened_files
from tests.shared_data import SHARED

WEKA = SHARED / "traces" / "weka"
MOONCAKE = SHARED / "traces" / "mooncake"
FIXTURES = Path(__file__).resolve().parent / "fixtures"

# missing data skips these, except under CI=true where it fails them (tests/conftest.py)
needs_weka = pytest.mark.shared("traces/weka")
needs_mooncake = pytest.mark.shared("traces/mooncake")


def _agents(data: dict) -> list[list[dict]]:
    """Raw request lists: the parent's, then each sub-agent's."""
    parent = [r for r in data["requests"] if r["type"] != "subagent"]
    subs = [r["requests"] for r in data["requests"] if r["type"] == "subagent"]
    return [parent, *subs]


def _raw_overlap_tokens(reqs: list[dict]) -> int:
    """Tokens covered by hash ids shared (as a prefix) with the previous request of the agent."""
    total = 0
    for prev, cur in zip(reqs, reqs[1:], strict=False):
        a, b = prev["hash_ids"], cur["hash_ids"]
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        total += n * 64
    return total


@pytest.fixture(scope="module")
def weka() -> Trace:
    return import_trace("weka", [WEKA])


@needs_weka
def test_every_weka_file_imports_with_raw_sums_and_overlap(weka: Trace) -> None:
    files = sorted(WEKA.glob("*.json"))
    assert files
    by_conv: dict[str, list] = {}
    for c in weka.calls:
        by_conv.setdefault(c.task.split("/")[0], []).append(c)
    for path in files:
        data = json.loads(path.read_text())
        agents = _agents(data)
        raw = [r for reqs in agents for r in reqs]
        calls = by_conv[data["id"]]
        sub = Trace(weka.header, calls)
        s = trace_stats(sub)
        assert s.calls == len(raw), path.name
        assert s.prompt_tokens == sum(r["in"] for r in raw), path.name
        assert s.output_tokens == sum(r["out"] for r in raw), path.name
        assert s.subagents == len(agents) - 1
        expected = sum(_raw_overlap_tokens(reqs) for reqs in agents) / s.prompt_tokens
        # Token expansion may add a coincidentally equal token after a shared prefix (p = 1/vocab).
        assert s.reuse_fraction == pytest.approx(expected, rel=1e-5, abs=1e-7), path.name
        totals = data["totals"]["combined_tokens"]
        assert (s.prompt_tokens, s.output_tokens) == (totals["input"], totals["output"])


@needs_weka
def test_weka_import_round_trips_through_the_reader(weka: Trace, tmp_path: Path) -> None:
    p = tmp_path / "weka.jsonl.gz"
    write_trace(weka, p)
    back = read_trace(p)
    assert len(back) == len(weka) and back.header.block_size == 64
    assert back.header.tokens == "blocks"
    t = "trace_0277"
    for x, y in zip(weka.steps(t), back.steps(t), strict=True):
        assert np.array_equal(x.prompt, y.prompt) and len(y.prompt) == y.call.prompt_len


@needs_weka
def test_weka_subagent_timing_semantics(weka: Trace) -> None:
    data = json.loads((WEKA / "trace_0277.json").read_text())
    parent = [r for r in data["requests"] if r["type"] != "subagent"]
    subs = [r for r in data["requests"] if r["type"] == "subagent"]
    calls = weka.tasks["trace_0277"]
    for s in subs:
        task = f"trace_0277/{s['agent_id']}"
        sc = weka.tasks[task]
        start = s["t"] - s["duration_ms"] / 1000  # the entry's t is its end
        spawn = max(i for i, r in enumerate(parent) if r["t"] + r["api_time"] <= start + 1.0)
        assert sc[0].parent == ("trace_0277", spawn)
        # First sub-agent call: gap from the spawning call's end to its own start.
        p_end = parent[spawn]["t"] + parent[spawn]["api_time"]
        assert sc[0].gap_s == pytest.approx(start + s["requests"][0]["t"] - p_end, abs=1e-6)
        assert sc[0].recorded["start_s"] == pytest.approx(start, abs=1e-6)
        # The parent's next call started after the sub-agent ended: it waited, so it joins.
        nxt = spawn + 1
        assert parent[nxt]["t"] >= s["t"]
        assert (task, len(sc) - 1) in calls[nxt].after
        # Its gap counts from the end of the latest joined sub-agent's last call (what `after`
        # names), not from the entry's `t`, when the sub-agent reported back seconds later.
        joined = {task for task, _ in calls[nxt].after}
        last_end = max(
            o["t"]
            - o["duration_ms"] / 1000
            + o["requests"][-1]["t"]
            + o["requests"][-1]["api_time"]
            for o in subs
            if f"trace_0277/{o['agent_id']}" in joined
        )
        assert calls[nxt].gap_s == pytest.approx(parent[nxt]["t"] - last_end, abs=1e-6)
        latest_report = max(o["t"] for o in subs if f"trace_0277/{o['agent_id']}" in joined)
        assert parent[nxt]["t"] - latest_report < calls[nxt].gap_s < parent[nxt]["think_time"]
    # Ordinary calls after a timed call keep think_time as their gap.
    plain = [i for i, c in enumerate(calls) if not c.after and i > 0]
    assert plain and all(calls[i].gap_s == parent[i]["think_time"] for i in plain)


@needs_weka
def test_weka_think_time_after_an_untimed_request_is_cut_to_the_idle_time(weka: Trace) -> None:
    """trace_0219's call 4 has no api_time; call 5's think_time (3,425 s) counts from call 3's end,
    so it spans call 4 too: the agent idled 13 s (4,960 -> 4,973 s), and the replay must too."""
    calls = weka.tasks["trace_0219"]
    assert calls[5].gap_s == pytest.approx(13.0)
    for a, b in zip(calls, calls[1:], strict=False):
        if not b.after:  # no call waits longer than the recording idled (`t` is whole seconds)
            assert b.gap_s <= max(0.0, b.recorded["start_s"] - a.recorded["end_s"]) + 1.0


def _weka_file(tmp_path: Path, requests: list) -> Path:
    p = tmp_path / "conv.json"
    p.write_text(
        json.dumps({"id": "conv", "block_size": 64, "hash_id_scope": "local", "requests": requests})
    )
    return p


def _r(t: float, n_in: int, hashes: list[int], api: float = 2.0, think: float = 0.0) -> dict:
    return {
        "t": t,
        "type": "n",
        "in": n_in,
        "out": 10,
        "hash_ids": hashes,
        "api_time": api,
        "think_time": think,
    }


def test_weka_think_time_spanning_an_untimed_request(tmp_path: Path) -> None:
    untimed = _r(10.0, 120, [1, 2], think=8.0)
    del untimed["api_time"]  # its end is unknown: taken as its start
    # The third request's think_time (18 s) counts from the first's end (2 s), not the second's.
    reqs = [_r(0.0, 100, [1]), untimed, _r(20.0, 140, [1, 2, 3], think=18.0)]
    t = import_trace("weka", [_weka_file(tmp_path, reqs)])
    assert [c.gap_s for c in t.tasks["conv"]] == [0.0, 8.0, 10.0]


def test_weka_detached_subagent_is_not_joined(tmp_path: Path) -> None:
    sub = {
        "t": 50.0, "type": "subagent", "agent_id": "agent_001", "duration_ms": 40_000,
        "requests": [_r(0.0, 130, [7, 8]), _r(5.0, 200, [7, 8, 9], think=3.0)],
    }  # fmt: skip
    reqs = [
        _r(0.0, 100, [1]),
        sub,
        _r(20.0, 140, [1, 2], think=8.0),
        _r(60.0, 200, [1, 2, 3], think=38.0),
    ]
    t = import_trace("weka", [_weka_file(tmp_path, reqs)])
    # Started at 10 s (ended 50 s, lasted 40 s): spawned by call 0 (ended 2 s); the parent's next
    # call (20 s) did not wait for it, so nothing joins it.
    sc = t.tasks["conv/agent_001"]
    assert sc[0].parent == ("conv", 0) and sc[0].gap_s == pytest.approx(8.0)
    assert all(not c.after for c in t.tasks["conv"])
    assert [c.gap_s for c in t.tasks["conv"]] == [0.0, 8.0, 38.0]
    assert [c.keep for c in t.tasks["conv"]] == [0, 1, 2]
    # 130 tokens over 2 hashed blocks: a 2-token unhashed tail.
    assert t.calls[0].prompt_len == 100 and len(next(t.steps("conv")).prompt) == 100


@pytest.mark.parametrize(
    ("request_patch", "field"),
    [
        ({"in": "many"}, "in"),
        ({"hash_ids": [1, 2, 3, 4]}, "hash_ids"),
        ({"t": None}, "t"),
        ({"hash_ids": [2**64 - 1]}, "hash_ids[0]"),  # past int64: was an OverflowError traceback
        ({"hash_ids": [True]}, "hash_ids[0]"),
        ({"type": "zzz"}, "type"),  # was taken as a call
    ],
)
def test_weka_bad_input_names_the_field(tmp_path: Path, request_patch: dict, field: str) -> None:
    p = _weka_file(tmp_path, [{**_r(0.0, 100, [1]), **request_patch}])
    with pytest.raises(TraceError) as ei:
        import_trace("weka", [p])
    assert ei.value.field == f"requests[0].{field}" and ei.value.file == str(p)


def _sub(t: float, duration_ms: float | None, *reqs: dict) -> dict:
    sub = {"t": t, "type": "subagent", "agent_id": "agent_001", "duration_ms": duration_ms}
    return {**sub, "requests": list(reqs) or [_r(0.0, 100, [7])]}


@pytest.mark.parametrize(
    ("first_t", "sub_t", "duration_ms", "starts_at"),
    [
        (0.0, 50.0, 1e15, "-1e+12 s"),  # milliseconds mistaken: 31,700 years back
        (0.0, 50.0, 50_500, "-0.5 s"),  # before the conversation, even within the tolerance
        (10.0, 50.0, 45_000, "5 s"),  # before the parent's first request, past the tolerance
    ],
    ids=["ms_mistaken", "before_the_conversation", "before_the_first_request"],
)
def test_weka_subagent_starting_before_the_parent_is_refused(
    tmp_path: Path, first_t: float, sub_t: float, duration_ms: float, starts_at: str
) -> None:
    """It was imported spawned by nothing: a detached root task with a start_s far in the past."""
    reqs = [_r(first_t, 100, [1]), _sub(sub_t, duration_ms), _r(60.0, 140, [1, 2])]
    p = _weka_file(tmp_path, reqs)
    with pytest.raises(TraceError) as ei:
        import_trace("weka", [p])
    e = ei.value
    assert (e.file, e.line, e.field) == (str(p), None, "requests[1].duration_ms")
    assert f"starts it at {starts_at}, before the parent's first request" in e.why
    assert "milliseconds" in e.why


def test_weka_subagent_starting_within_the_tolerance_before_the_first_call_is_its_child(
    tmp_path: Path,
) -> None:
    """Parent times are whole seconds: a start 0.5 s before the first call's `t` is that call's."""
    reqs = [_r(10.0, 100, [1]), _sub(30.0, 20_500), _r(60.0, 140, [1, 2], think=8.0)]
    t = import_trace("weka", [_weka_file(tmp_path, reqs)])
    sc = t.tasks["conv/agent_001"]
    assert sc[0].parent == ("conv", 0) and sc[0].recorded["start_s"] == 9.5
    assert sc[0].gap_s == 0.0  # started before its spawning call ended (12 s): clamped
    assert t.tasks["conv"][1].after == (("conv/agent_001", 0),)  # the parent waited (60 > 30)


def test_weka_subagent_without_duration_ms_is_refused(tmp_path: Path) -> None:
    """Every published sub-agent entry has it; without it the start was taken as `t`, its end."""
    p = _weka_file(tmp_path, [_r(0.0, 100, [1]), _sub(50.0, None), _r(60.0, 140, [1, 2])])
    with pytest.raises(TraceError) as ei:
        import_trace("weka", [p])
    assert (ei.value.file, ei.value.field) == (str(p), "requests[1].duration_ms")
    assert ei.value.why.startswith("missing")


@pytest.mark.parametrize(
    ("inner", "field"),
    [
        ({**_r(0.0, 100, [7]), "type": "zzz"}, "requests[1].requests[0].type"),
        (_sub(5.0, 1_000), "requests[1].requests[0].type"),  # sub-agents do not nest
        (7, "requests[1].requests[0]"),  # was an AttributeError traceback
    ],
)
def test_weka_bad_subagent_request_names_its_key_path(
    tmp_path: Path, inner: object, field: str
) -> None:
    p = _weka_file(tmp_path, [_r(0.0, 100, [1]), {**_sub(50.0, 40_000), "requests": [inner]}])
    with pytest.raises(TraceError) as ei:
        import_trace("weka", [p])
    assert (ei.value.file, ei.value.field) == (str(p), field)


def test_weka_unknown_type_lists_the_known_ones(tmp_path: Path) -> None:
    p = _weka_file(tmp_path, [{**_r(0.0, 100, [1]), "type": "zzz"}])
    with pytest.raises(TraceError, match=r"is 'zzz'; known types: n, s \(requests\), subagent"):
        import_trace("weka", [p])


def test_weka_request_types_n_and_s_and_none_are_calls(tmp_path: Path) -> None:
    """The published traces have `n` and `s` requests; a request without `type` is a call too."""
    untyped = {k: v for k, v in _r(20.0, 200, [1, 2, 3]).items() if k != "type"}
    reqs = [_r(0.0, 100, [1]), {**_r(10.0, 140, [1, 2]), "type": "s"}, untyped]
    t = import_trace("weka", [_weka_file(tmp_path, reqs)])
    assert [c.prompt_len for c in t.tasks["conv"]] == [100, 140, 200]


def test_weka_gzipped_file_says_to_decompress_it(tmp_path: Path) -> None:
    """It said `invalid JSON: str is not valid UTF-8`."""
    plain = _weka_file(tmp_path, [_r(0.0, 100, [1])])
    p = tmp_path / "conv.json.gz"
    p.write_bytes(gzip.compress(plain.read_bytes()))
    with pytest.raises(TraceError) as ei:
        import_trace("weka", [p])
    assert (ei.value.file, ei.value.field) == (str(p), None)
    assert ei.value.why == "is gzip-compressed; decompress it first"


def _tokenlog(d: Path) -> Path:
    p = d / "log.jsonl"
    p.write_text('{"task_id": "a", "prompt_token_ids": [1], "generated_token_ids": [2], '
                 '"start_time": 0, "end_time": 1}\n')  # fmt: skip
    return p


def _efficientagent(d: Path) -> Path:
    write_fixture(d)
    return sorted(d.glob("*.jsonl.gz"))[0]


@pytest.mark.parametrize(
    ("kind", "make", "twice"),
    [
        ("weka", lambda d: _weka_file(d, [_r(0.0, 100, [1])]), lambda p: [p, p]),
        ("weka", lambda d: _weka_file(d, [_r(0.0, 100, [1])]), lambda p: [p.parent, p]),
        ("mooncake", lambda d: _mooncake_file(d, _MC),
         lambda p: [p, p.parent / ".." / p.parent.name / p.name]),  # another path to it
        ("tokenlog", _tokenlog, lambda p: [p, p]),
        ("efficientagent", _efficientagent, lambda p: [p.parent, p.parent]),
    ],
)  # fmt: skip
def test_the_same_source_file_twice_is_refused(tmp_path: Path, kind: str, make, twice) -> None:
    """It imported the file's tasks twice (weka renamed the copy `conv@conv`)."""
    first = make(tmp_path)
    sources = twice(first)
    with pytest.raises(TraceError) as ei:
        import_trace(kind, sources)
    assert ei.value.file == str(sources[-1] if sources[-1].is_file() else first)
    also = "" if ei.value.file == str(first) else f" (also as {first})"
    assert ei.value.why == f"given twice{also}; give each source file once"


@needs_mooncake
@pytest.mark.parametrize(
    ("name", "n", "mean_in", "mean_out"),
    [
        ("conversation_trace.jsonl", 12_031, 12_035, 343),
        ("synthetic_trace.jsonl", 3_993, 15_325, 149),
    ],
)
def test_mooncake_matches_published_means(name: str, n: int, mean_in: int, mean_out: int) -> None:
    t = import_trace("mooncake", [MOONCAKE / name])
    assert len(t) == n and len(t.tasks) == n  # open loop: one call per task
    assert round(t.prompt_tokens / n) == mean_in
    assert round(t.output_tokens / n) == mean_out
    assert t.header.block_size == 512
    ats = [c.at_s for c in t.calls]
    assert ats == sorted(ats) and ats[0] == 0.0
    first = json.loads((MOONCAKE / name).open().readline())
    assert t.calls[0].prompt_len == first["input_length"]


_MC = {"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [1, 2]}


def _mooncake_file(d: Path, *rows: dict) -> Path:
    p = d / "m.jsonl"
    p.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return p


@pytest.mark.parametrize(
    ("hashes", "bad"),
    [([0, 1.7], 1), ([True, 2], 0), (["1", 2], 0), ([1, 1e3], 1), ([-1, 2], 0), ([1, 2**63], 1)],
)
def test_mooncake_hash_ids_must_be_json_integers(tmp_path: Path, hashes: list, bad: int) -> None:
    """1.7, true, "1" and 1e3 were read as 1, 1, 1 and 1000: another block's identity."""
    p = _mooncake_file(tmp_path, _MC, {**_MC, "hash_ids": hashes})
    with pytest.raises(TraceError) as ei:
        import_trace("mooncake", [p])
    e = ei.value
    assert (e.file, e.line, e.field) == (str(p), 2, f"hash_ids[{bad}]")
    assert e.why.endswith("; block hash ids are integers in 0 .. 2**63-1")


@pytest.mark.parametrize(
    ("timestamps", "why"),
    [
        ([0, 1.7e15], r"^1\.7e\+15 ms is 1\.7e\+12 s, more than 1e\+11 s; "),
        ([0, 1.7e12], r"^arrives 1\.7e\+09 s after .*m\.jsonl:1, more than 1e\+09 s; "),
    ],
    ids=["past_max_at_s", "past_max_span_s"],
)
def test_mooncake_epoch_timestamps_are_refused_at_import(
    tmp_path: Path, timestamps: list[float], why: str
) -> None:
    """They imported, and then the trace failed `trace validate` (at_s too large or too spread)."""
    p = _mooncake_file(tmp_path, *({**_MC, "timestamp": ts} for ts in timestamps))
    with pytest.raises(TraceError) as ei:
        import_trace("mooncake", [p])
    e = ei.value
    assert (e.file, e.line, e.field) == (str(p), 2, "timestamp")
    assert re.search(why, e.why)
    assert e.why.endswith("Mooncake timestamps are milliseconds from the trace's start "
                          "(subtract the first one)")  # fmt: skip


def test_mooncake_timestamps_at_the_readers_bound_import_and_read_back(tmp_path: Path) -> None:
    p = _mooncake_file(tmp_path, *[{**_MC, "timestamp": MAX_AT_S * 1000}] * 2)
    out = tmp_path / "mc.jsonl"
    write_trace(import_trace("mooncake", [p]), out)
    back = read_trace(out)
    assert is_open_loop(back) and [c.at_s for c in back.calls] == [MAX_AT_S] * 2


@needs_mooncake
def test_mooncake_equal_hash_ids_give_equal_tokens() -> None:
    t = import_trace("mooncake", [MOONCAKE / "conversation_trace.jsonl"])
    a, b = t.calls[0], t.calls[1]
    assert a.append[0] == b.append[0] and a.append[1] != b.append[1]
    pa, pb = next(t.steps(a.task)).prompt, next(t.steps(b.task)).prompt
    assert np.array_equal(pa[:512], pb[:512])
    assert not np.array_equal(pa[512:1024], pb[512:1024])


def _same_trace(got: Trace, want: Trace) -> None:
    """Prompts, outputs, gaps and tail gaps of every task are those of `want`, in its order."""
    assert list(got.tasks) == want.root_task_ids
    for task in want.root_task_ids:
        g, w = list(got.steps(task)), list(want.steps(task))
        assert [s.prompt.tolist() for s in g] == [s.prompt.tolist() for s in w]
        assert [s.output.tolist() for s in g] == [s.output.tolist() for s in w]
        assert [s.call.gap_s for s in g] == [s.call.gap_s for s in w]
        assert g[-1].call.tail_gap_s == (w[-1].call.tail_gap_s or 0.0)


def test_efficientagent_release_layout_round_trips_the_generators_trace(tmp_path: Path) -> None:
    want = fixture_trace()
    write_fixture(tmp_path, want)
    _same_trace(import_trace("efficientagent", [tmp_path]), want)
    # the manifest named stands for its folder (it was read as a task file: "invalid JSON")
    _same_trace(import_trace("efficientagent", [tmp_path / "trace_manifest.json"]), want)


def test_efficientagent_fixture_is_in_the_release_layout() -> None:
    """The committed fixture: the release's manifest and file names, `seq` from 1, every field of
    a call line, and hashes that hold (the import checks each call's prompt_sha256)."""
    d = FIXTURES / "efficientagent"
    manifest = json.loads((d / "trace_manifest.json").read_text())
    assert manifest["schema"] == "efficientagent.replay_trace.v1"
    names = sorted(p.name for p in d.glob("*.jsonl.gz"))
    assert [f["file"] for f in manifest["files"]] == names
    assert all(re.fullmatch(rf"{f['order']:03d}_{f['instance_id']}\.jsonl\.gz", f["file"])
               for f in manifest["files"])  # fmt: skip
    rows = _task_lines(d / names[0])
    assert {"instance_id", "order", "tail_gap_s"} <= rows[0].keys()
    assert [r["seq"] for r in rows[1:]] == list(range(1, len(rows)))
    fields = {"seq", "gap_before_s", "prompt_shared", "prompt_suffix", "prompt_len", "output",
              "output_len", "recorded_client_elapsed_s", "prompt_sha256"}  # fmt: skip
    assert all(r.keys() == fields for r in rows[1:])
    t = import_trace("efficientagent", [d])
    assert list(t.tasks) == [f["instance_id"] for f in manifest["files"]]
    assert t.prompt_tokens == manifest["prompt_tokens"] and len(t) == manifest["steps"]
    assert t.output_tokens == manifest["output_tokens"]
    # consecutive prompts keep the previous prompt and output: the output moves into `keep`
    first = t.tasks[manifest["files"][0]["instance_id"]]
    assert first[1].keep == first[0].prompt_len + first[0].output_len


def test_prompt_sha256_is_the_releases_digest() -> None:
    """SHA-256 of `json.dumps(ids)` (`[1, 2, 3]`), as the release's build_trace computes it."""
    for ids in ([], [7], [1, 2, 3], list(range(0, 200_000, 7))):
        want = hashlib.sha256(json.dumps(ids).encode()).hexdigest()
        assert prompt_sha256(np.asarray(ids, dtype=np.int32)) == want


def _task_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in gzip.decompress(path.read_bytes()).splitlines()]


def _rewrite_task(path: Path, edit, *, manifest_too: bool = True) -> None:
    """Rewrite a task file through `edit`; with `manifest_too` its manifest entry's digest follows,
    as a rebuilt trace's would, so only the per-call checks see the edit."""
    rows = _task_lines(path)
    edit(rows)
    data = gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode())
    path.write_bytes(data)
    m = path.parent / "trace_manifest.json"
    if manifest_too and m.is_file():
        manifest = json.loads(m.read_text())
        for entry in manifest.get("files", []):
            if entry.get("file") == path.name:
                entry["sha256"] = hashlib.sha256(data).hexdigest()
        m.write_text(json.dumps(manifest, indent=1) + "\n")


def test_efficientagent_a_task_file_changed_after_its_manifest_is_refused(tmp_path: Path) -> None:
    write_fixture(tmp_path)
    task = sorted(tmp_path.glob("*.jsonl.gz"))[2]
    _rewrite_task(task, lambda rows: rows.pop(), manifest_too=False)  # its last call cut
    with pytest.raises(TraceError) as ei:
        import_trace("efficientagent", [tmp_path])
    assert (ei.value.file, ei.value.field) == (str(task), "sha256")
    assert "manifest lists" in ei.value.why


def test_efficientagent_each_task_file_is_read_once(tmp_path: Path) -> None:
    """The bytes hashed against the manifest are the bytes parsed: one open per task file (seen
    through the interpreter's audit hook), so a large release trace is not read from disk twice."""
    write_fixture(tmp_path)
    with opened_files() as opened:
        import_trace("efficientagent", [tmp_path])
    tasks = sorted(str(p) for p in tmp_path.glob("*.jsonl.gz"))
    assert len(tasks) == 3
    assert sorted(p for p in opened if p.endswith(".jsonl.gz")) == tasks


def test_efficientagent_a_task_file_the_manifest_lists_must_be_there(tmp_path: Path) -> None:
    write_fixture(tmp_path)
    gone = sorted(tmp_path.glob("*.jsonl.gz"))[0]
    gone.unlink()
    with pytest.raises(TraceError) as ei:
        import_trace("efficientagent", [tmp_path])
    assert ei.value.field == "files[0].file" and gone.name in ei.value.why


def test_efficientagent_prompt_sha256_mismatch_names_file_line_and_field(tmp_path: Path) -> None:
    write_fixture(tmp_path)
    task = sorted(tmp_path.glob("*.jsonl.gz"))[1]

    def edit(rows: list[dict]) -> None:  # one id of the third call's suffix changed
        rows[3]["prompt_suffix"][-1] = (rows[3]["prompt_suffix"][-1] + 1) % 1000

    _rewrite_task(task, edit)
    with pytest.raises(TraceError) as ei:
        import_trace("efficientagent", [tmp_path])
    e = ei.value
    assert (e.file, e.line, e.field) == (str(task), 4, "prompt_sha256")
    assert "rebuild it" in e.why


def test_efficientagent_without_prompt_sha256_still_imports(tmp_path: Path) -> None:
    want = fixture_trace()
    write_fixture(tmp_path, want)
    for task in tmp_path.glob("*.jsonl.gz"):
        _rewrite_task(task, lambda rows: [r.pop("prompt_sha256", None) for r in rows])
    _same_trace(import_trace("efficientagent", [tmp_path]), want)


def test_efficientagent_other_schema_is_refused(tmp_path: Path) -> None:
    write_fixture(tmp_path)
    m = tmp_path / "trace_manifest.json"
    m.write_text(
        json.dumps({**json.loads(m.read_text()), "schema": "efficientagent.replay_trace.v2"})
    )
    with pytest.raises(TraceError) as ei:
        import_trace("efficientagent", [tmp_path])
    assert ei.value.field == "schema" and "replay_trace.v1" in ei.value.why


def test_efficientagent_bad_prompt_shared(tmp_path: Path) -> None:
    p = tmp_path / "x.jsonl.gz"
    with gzip.open(p, "wb") as f:
        f.write(b'{"instance_id": "x", "order": 0}\n')
        f.write(b'{"seq": 1, "gap_before_s": 0, "prompt_shared": 4, "prompt_suffix": [1], '
                b'"prompt_len": 5, "output": [2], "output_len": 1}\n')  # fmt: skip
    with pytest.raises(TraceError) as ei:
        import_trace("efficientagent", [tmp_path])
    assert (ei.value.line, ei.value.field) == (2, "prompt_shared")


def test_tokenlog_orders_groups_and_computes_gaps(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    rows = [
        {"task_id": "b", "prompt_token_ids": [9, 9], "generated_token_ids": [1], "start_time": 100.5, "end_time": 101.0},
        {"task_id": "a", "prompt_token_ids": [1, 2, 3, 4, 5, 6, 7], "generated_token_ids": [5], "start_time": 104.0, "end_time": 105.0},
        {"task_id": "a", "prompt_token_ids": [1, 2, 3], "generated_token_ids": [4, 5], "start_time": 100.0, "end_time": 102.0},
    ]  # fmt: skip
    log.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    t = import_trace("tokenlog", [log])
    assert list(t.tasks) == ["a", "b"]
    a = t.tasks["a"]
    assert [c.keep for c in a] == [0, 5] and a[1].append.tolist() == [6, 7]
    assert a[1].gap_s == 2.0 and a[0].recorded == {"start_s": 0.0, "end_s": 2.0}
    assert [s.prompt.tolist() for s in t.steps("a")][1] == [1, 2, 3, 4, 5, 6, 7]
    assert t.tasks["b"][0].recorded["start_s"] == 0.5


def test_tokenlog_missing_field(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text('{"task_id": "a", "prompt_token_ids": [1], "generated_token_ids": [2]}\n')
    with pytest.raises(TraceError) as ei:
        import_trace("tokenlog", [log])
    assert (ei.value.line, ei.value.field) == (1, "start_time")


def test_unknown_importer() -> None:
    with pytest.raises(ConfigError, match="weka"):
        import_trace("nope", ["x"])


def test_importing_several_mooncake_files_notes_that_their_loads_overlap(tmp_path: Path) -> None:
    from tests.cli_batch import run_one

    for name in ("a", "b"):
        d = tmp_path / name
        d.mkdir()
        _mooncake_file(d, _MC).rename(tmp_path / f"{name}.jsonl")
    argv = ["trace", "import", "--from", "mooncake", "a.jsonl", "b.jsonl", "-o", "o.jsonl"]
    r = run_one(str(tmp_path), argv)
    assert r["code"] == 0 and "2 Mooncake files (a, b) keep their own timestamps" in r["err"]
    r = run_one(str(tmp_path), [*argv[:4], "a.jsonl", "-o", "one.jsonl"])
    assert r["code"] == 0 and "note" not in r["err"]


def test_mooncake_files_sharing_a_name_keep_their_tasks_and_hashes_apart(tmp_path: Path) -> None:
    """d1/trace.jsonl and d2/trace.jsonl: both named their tasks trace-000001 and their hash
    namespace mooncake:trace, so the import crashed (a call twice) or, with different line
    counts, took one file's hash ids for the other's blocks."""
    row = {"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [1, 2]}
    for d in ("d1", "d2"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "trace.jsonl").write_bytes(orjson.dumps(row) + b"\n")
    trace = import_trace("mooncake", [tmp_path / "d1", tmp_path / "d2"])
    assert sorted(trace.task_ids) == ["d1/trace-000001", "d2/trace-000001"]
    assert sorted(c.ns for c in trace.calls) == ["mooncake:d1/trace", "mooncake:d2/trace"]
    one, two = (next(iter(trace.steps(t))).prompt for t in sorted(trace.task_ids))
    assert not np.array_equal(one[:512], two[:512])  # hash 1 of each file is its own block
    assert trace.header.meta["files"] == ["d1/trace.jsonl", "d2/trace.jsonl"]


def test_an_import_the_reader_would_refuse_writes_nothing(tmp_path: Path) -> None:
    from tests.cli_batch import run_one

    req = {"t": 0, "in": 100, "out": 5, "hash_ids": [1], "api_time": 1.0, "think_time": 2e9}
    src = tmp_path / "c.json"
    src.write_bytes(orjson.dumps({"id": "c", "block_size": 64, "requests": [req, req]}))
    (tmp_path / "o.jsonl").write_text("kept\n")  # an earlier output stays as it was
    r = run_one(str(tmp_path), ["trace", "import", "--from", "weka", str(src), "-o", "o.jsonl"])
    assert r["code"] == 2 and "gap_s" in r["err"] + r["out"]
    assert (tmp_path / "o.jsonl").read_text() == "kept\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.json", "o.jsonl"]  # no temp file
