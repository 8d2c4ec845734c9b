"""Importers against the real traces in ../shared/traces and hand-written fixtures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import orjson
import pytest

from replay.errors import ConfigError, TraceError
from replay.trace.importers import import_trace
from replay.trace.io import read_trace, write_trace
from replay.trace.model import Trace
from replay.trace.stats import trace_stats
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
        joined = {task for task, _ in calls[nxt].after}
        latest = max(o["t"] for o in subs if f"trace_0277/{o['agent_id']}" in joined)
        assert calls[nxt].gap_s == pytest.approx(parent[nxt]["t"] - latest, abs=1e-6)
        assert calls[nxt].gap_s < parent[nxt]["think_time"]
    # Ordinary calls keep think_time as their gap.
    plain = [i for i, c in enumerate(calls) if not c.after and i > 0]
    assert plain and all(calls[i].gap_s == parent[i]["think_time"] for i in plain)


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
    [({"in": "many"}, "in"), ({"hash_ids": [1, 2, 3, 4]}, "hash_ids"), ({"t": None}, "t")],
)
def test_weka_bad_input_names_the_field(tmp_path: Path, request_patch: dict, field: str) -> None:
    p = _weka_file(tmp_path, [{**_r(0.0, 100, [1]), **request_patch}])
    with pytest.raises(TraceError) as ei:
        import_trace("weka", [p])
    assert ei.value.field == f"requests[0].{field}" and ei.value.file == str(p)


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


@needs_mooncake
def test_mooncake_equal_hash_ids_give_equal_tokens() -> None:
    t = import_trace("mooncake", [MOONCAKE / "conversation_trace.jsonl"])
    a, b = t.calls[0], t.calls[1]
    assert a.append[0] == b.append[0] and a.append[1] != b.append[1]
    pa, pb = next(t.steps(a.task)).prompt, next(t.steps(b.task)).prompt
    assert np.array_equal(pa[:512], pb[:512])
    assert not np.array_equal(pa[512:1024], pb[512:1024])


def test_efficientagent_fixture() -> None:
    t = import_trace("efficientagent", [FIXTURES / "efficientagent"])
    assert list(t.tasks) == ["astropy__astropy-2", "django__django-1"]  # by `order`
    assert t.header.vocab_size == 100 and t.header.model == "tiny-test-model"
    prompts = [s.prompt.tolist() for s in t.steps("django__django-1")]
    assert prompts == [[1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 2, 3, 11, 12]]
    d = t.tasks["django__django-1"]
    assert [c.keep for c in d] == [0, 7, 3]  # the previous output moved into keep
    assert [c.gap_s for c in d] == [0.0, 3.0, 1.5]
    assert d[-1].tail_gap_s == 2.5 and d[-1].recorded == {"task_jct_s": 30.0}
    assert [s.prompt.tolist() for s in t.steps("astropy__astropy-2")][1] == [20, 21, 22, 24, 25]
    assert [s.output.tolist() for s in t.steps("astropy__astropy-2")] == [[23], [26, 27]]


def test_efficientagent_bad_prompt_shared(tmp_path: Path) -> None:
    import gzip

    p = tmp_path / "x.jsonl.gz"
    with gzip.open(p, "wb") as f:
        f.write(b'{"instance_id": "x", "order": 0}\n')
        f.write(b'{"seq": 0, "gap_before_s": 0, "prompt_shared": 4, "prompt_suffix": [1], '
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
