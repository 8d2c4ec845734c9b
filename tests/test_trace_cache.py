"""The parsed-trace cache (replay/trace/cache.py): a cached read is the parsed trace exactly, an
edited trace is parsed again, and anything doubtful in the cache is a miss, never a wrong trace."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path

import numpy as np
import orjson
import pytest

from replay.trace import cache
from replay.trace.io import read_trace, write_trace
from replay.trace.model import Call, Trace, TraceHeader
from tests.open_counter import opened_files
from tests.subprocess_helpers import replay_cli

# enough ids that the file passes MIN_CACHED_BYTES gzipped too (random 5-digit ids)
BIG_IDS = 500_000


def _ids_trace(seed: int = 0) -> Trace:
    """Every optional field set somewhere: outputs, recorded timings, a spawned task that waits
    on another, tail gaps, namespaces, an empty append."""
    rng = np.random.default_rng(seed)
    ids = lambda n: rng.integers(0, 50_000, n, dtype=np.int32)  # noqa: E731
    first = ids(BIG_IDS)
    calls = [
        Call("a", 0, 0.0, 0, first, BIG_IDS, 3, output=ids(3), recorded={"ttft_s": 0.25, "n": 2}),
        Call("a", 1, 1.5, BIG_IDS + 3, ids(40), BIG_IDS + 43, 5, ns="ns-a"),
        Call("b", 0, 0.125, 0, ids(7), 7, 2, parent=("a", 0), recorded={"x": None}),
        Call("b", 1, 0.0, 9, np.empty(0, np.int32), 9, 1, after=(("a", 1),), tail_gap_s=2.0),
        Call("a", 2, 0.5, 10, ids(11), 21, 0, output=np.empty(0, np.int32)),
    ]
    header = TraceHeader(vocab_size=50_000, model="m", source="test", meta={"k": [1, 2.5]})
    return Trace(header, calls)


def _blocks_trace() -> Trace:
    n = 200_000
    blocks = np.random.default_rng(3).integers(1 << 40, 1 << 50, n, dtype=np.int64)
    calls = [
        Call("t", 0, 0.0, 0, blocks, n * 16 - 3, 8, at_s=1.0),
        Call("t", 1, 0.5, n, blocks[:5].copy(), (n + 5) * 16, 8, at_s=2.5),
    ]
    return Trace(TraceHeader(tokens="blocks", block_size=16, vocab_size=32_000), calls)


def _same(got: Trace, want: Trace) -> None:
    assert got.header == want.header
    assert len(got.calls) == len(want.calls)
    for g, w in zip(got.calls, want.calls, strict=True):
        for f in dataclasses.fields(Call):
            a, b = getattr(g, f.name), getattr(w, f.name)
            if isinstance(b, np.ndarray):
                assert isinstance(a, np.ndarray) and a.dtype == b.dtype, f.name
                assert np.array_equal(a, b), f.name
            else:
                assert a == b and type(a) is type(b), (f.name, a, b)


def _entries(d: Path) -> list[Path]:
    return sorted(d.glob("*.trace-cache")) if d.exists() else []


@pytest.mark.parametrize("make", [_ids_trace, _blocks_trace], ids=["ids", "blocks"])
@pytest.mark.parametrize("name", ["t.jsonl", "t.jsonl.gz"])
def test_a_cached_read_is_the_parsed_trace(tmp_path, make, name):
    path = tmp_path / name
    write_trace(make(), path)
    assert path.stat().st_size >= cache.MIN_CACHED_BYTES
    parsed = read_trace(path)
    d = tmp_path / "cache"
    first = read_trace(path, d)  # parses, stores
    assert len(_entries(d)) == 1
    again = read_trace(path, d)  # loads
    for got in (first, again):
        _same(got, parsed)
        assert got.path == str(path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert first.sha256 == again.sha256 == digest
    assert _entries(d)[0].name == f"{digest}.trace-cache"


def test_an_edited_trace_is_parsed_again_even_with_the_same_size_and_mtime(tmp_path):
    path, d = tmp_path / "t.jsonl", tmp_path / "cache"
    write_trace(_ids_trace(), path)
    assert read_trace(path, d).calls[1].gap_s == 1.5
    st = path.stat()
    text = path.read_bytes()
    assert text.count(b'"gap_s":1.5') == 1
    path.write_bytes(text.replace(b'"gap_s":1.5', b'"gap_s":2.5'))  # same length
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the same mtime
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    edited = read_trace(path, d)
    assert edited.calls[1].gap_s == 2.5
    _same(edited, read_trace(path))
    assert len(_entries(d)) == 2  # one per content; the old one is harmless
    assert read_trace(path, d).calls[1].gap_s == 2.5


def test_a_hit_loads_the_entry_without_parsing_the_file(tmp_path):
    # an entry stored under this file's digest is what a read returns: the proof that the
    # cache, not the file, was read (and why entries are named by the digest of the bytes)
    path, d = tmp_path / "t.jsonl", tmp_path / "cache"
    write_trace(_ids_trace(seed=1), path)
    digest, st = cache.file_sha256(path)
    other = _ids_trace(seed=2)
    assert cache.store(other, digest, st.st_size, d)
    got = read_trace(path, d)
    assert np.array_equal(got.calls[0].append, other.calls[0].append)
    assert not np.array_equal(got.calls[0].append, read_trace(path).calls[0].append)


def test_an_entry_of_other_bytes_or_damaged_is_a_miss(tmp_path):
    d = tmp_path / "cache"
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_trace(_ids_trace(seed=1), a)
    write_trace(_ids_trace(seed=2), b)
    read_trace(a, d)
    (entry,) = _entries(d)
    digest_b, _ = cache.file_sha256(b)
    # a's entry under b's name: its recorded digest is a's, so it is not used for b
    entry.rename(d / f"{digest_b}.trace-cache")
    _same(read_trace(b, d), read_trace(b))
    # damaged entries: cut short, a flipped length field, not JSON, another layout
    good = _entries(d)[0].read_bytes()
    head = len(cache.MAGIC)
    damaged = [
        good[:-4],
        good[: head + 3],
        good[:head] + b"\xff" * 8 + good[head + 8 :],
        good.replace(b'"calls"', b'"callz"'),
        b"replay-trace-cache-0\n" + good[head:],
    ]
    for bad in damaged:
        for e in _entries(d):
            e.write_bytes(bad)
        _same(read_trace(b, d), read_trace(b))
    # the miss rewrote the entry, whole again
    assert [e.read_bytes() for e in _entries(d) if e.name.startswith(digest_b)] == [good]


def test_an_entry_written_by_other_reader_code_is_a_miss(tmp_path):
    """Another replay version sharing the cache (other reader or validation code) may have parsed
    the same bytes differently: its entry is not used, and is replaced by this version's."""
    path, d = tmp_path / "t.jsonl", tmp_path / "cache"
    write_trace(_ids_trace(seed=1), path)
    digest, st = cache.file_sha256(path)
    ours = cache.reader_fingerprint()
    assert len(ours) == 64 and ours == cache.reader_fingerprint()
    other = _ids_trace(seed=2)
    assert cache.store(other, digest, st.st_size, d)
    (entry,) = _entries(d)
    # the same entry as another version's code would write it: only the fingerprint differs
    entry.write_bytes(entry.read_bytes().replace(ours.encode(), b"f" * 64, 1))
    _same(read_trace(path, d), read_trace(path))
    assert ours.encode() in entry.read_bytes()  # rewritten by this version


def test_small_traces_and_an_unwritable_cache_read_as_usual(tmp_path):
    small = tmp_path / "small.jsonl"
    trace = _ids_trace()
    write_trace(
        Trace(trace.header, [Call("s", 0, 0.0, 0, np.arange(9, dtype=np.int32), 9, 2)]), small
    )
    read_trace(small, tmp_path / "cache")
    assert not (tmp_path / "cache").exists()
    path = tmp_path / "t.jsonl"
    write_trace(trace, path)
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    _same(read_trace(path, blocked / "cache"), read_trace(path))


def test_the_least_recently_used_entries_go_past_the_size_limit(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    paths = [tmp_path / f"t{seed}.jsonl" for seed in range(4)]
    for seed, p in enumerate(paths):
        write_trace(_ids_trace(seed=seed), p)
    digests = [cache.file_sha256(p)[0] for p in paths]
    for p, age_s in zip(paths[:3], (300, 200, 100), strict=True):
        read_trace(p, d)
        os.utime(d / f"{digests[paths.index(p)]}.trace-cache", (1e9 - age_s, 1e9 - age_s))
    sizes = [e.stat().st_size for e in _entries(d)]
    assert len(sizes) == 3
    read_trace(paths[0], d)  # a hit: t0, the oldest stored, is now the latest used
    # room for two entries: storing a fourth removes t1, then t2
    monkeypatch.setenv("REPLAY_TRACE_CACHE_MAX_BYTES", str(2 * max(sizes) + 100))
    read_trace(paths[3], d)
    assert {e.name.split(".")[0] for e in _entries(d)} == {digests[0], digests[3]}


def test_replay_run_uses_the_cache_and_no_trace_cache_turns_it_off(tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl"
    write_trace(_ids_trace(), path)
    d = tmp_path / "cache"
    monkeypatch.setenv("REPLAY_TRACE_CACHE", str(d))
    args = ["run", "--trace", str(path), "--pool", "2", "--engine", "sim", "--quiet"]
    off = replay_cli(*args, "--out", str(tmp_path / "r0"), "--no-trace-cache")
    assert off.returncode == 0, off.stderr
    assert _entries(d) == []
    for run in ("r1", "r2"):  # the second run loads the entry the first stored
        got = replay_cli(*args, "--out", str(tmp_path / run))
        assert got.returncode == 0, got.stderr
        assert len(_entries(d)) == 1
    runs = [orjson.loads((tmp_path / r / "run.json").read_bytes()) for r in ("r0", "r1", "r2")]
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert {r["provenance"]["trace_sha256"] for r in runs} == {digest}
    calls = [(tmp_path / r / "calls.parquet").stat().st_size > 0 for r in ("r0", "r1", "r2")]
    assert all(calls)
    monkeypatch.setenv("REPLAY_TRACE_CACHE", "off")
    assert cache.default_cache_dir() is None


def test_a_killed_writers_leftover_goes_after_a_day(tmp_path):
    d = tmp_path / "cache"
    d.mkdir()
    old, fresh = d / ".old.tmp", d / ".fresh.tmp"
    for f in (old, fresh):
        f.write_bytes(b"part of an entry")
    os.utime(old, (1e9, 1e9))
    path = tmp_path / "t.jsonl"
    write_trace(_ids_trace(), path)
    read_trace(path, d)
    assert not old.exists() and fresh.exists() and len(_entries(d)) == 1


def test_a_miss_reads_the_file_once_and_a_file_too_large_to_hold_twice(tmp_path, monkeypatch):
    # the bytes hashed to look the entry up are the bytes parsed: a large trace is not read
    # from disk twice on its first read; past MAX_HELD_BYTES it is, and parses the same
    path, d = tmp_path / "t.jsonl.gz", tmp_path / "cache"
    write_trace(_ids_trace(seed=3), path)
    with opened_files() as opened:
        held = read_trace(path, d)
    assert opened.count(str(path)) == 1
    assert len(_entries(d)) == 1
    monkeypatch.setattr(cache, "MAX_HELD_BYTES", path.stat().st_size - 1)
    with opened_files() as opened:
        streamed = read_trace(path, tmp_path / "cache2")
    assert opened.count(str(path)) == 2
    _same(streamed, held)


def test_a_bad_size_limit_is_refused_before_the_run_naming_the_variable(tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl"
    write_trace(_ids_trace(), path)
    monkeypatch.setenv("REPLAY_TRACE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("REPLAY_TRACE_CACHE_MAX_BYTES", "8G")  # was a traceback after the store
    args = ["run", "--trace", str(path), "--pool", "2", "--engine", "sim", "--quiet"]
    got = replay_cli(*args, "--out", str(tmp_path / "r"))
    assert got.returncode == 2 and "Traceback" not in got.stderr
    assert "$REPLAY_TRACE_CACHE_MAX_BYTES" in got.stderr and "'8G'" in got.stderr
    assert not (tmp_path / "r").exists()
    monkeypatch.setenv("REPLAY_TRACE_CACHE_MAX_BYTES", "1000000")
    assert replay_cli(*args, "--out", str(tmp_path / "r")).returncode == 0
