"""A parsed-trace cache: a validated trace kept as one binary file, named by the sha256 of the
trace file's bytes, so a second read of the same trace skips gunzip, JSON and validation.

Reading a 100K-token-prompt trace costs ~0.45 s of CPU (gzip, ~7M decimal ids, checks), most of
a short replay's whole cost; the cached form loads in a few ms plus the hash of the file. It can
never be stale: the name is the digest of the bytes read, a cache file also holds the trace's
size and digest and is checked against both, and an entry is stored only when the trace file's
size and mtime are the same after parsing as before hashing (an edit while it was being read
leaves no entry), and an entry written by other reader code (another replay version) is a miss. Anything unreadable in the cache counts as a miss: the trace is parsed again.

Layout: MAGIC, the metadata's length (8 bytes, little-endian), the metadata (JSON: header, the
calls without their ids, array lengths), zero padding to 8 bytes, then every call's `append`
ids, then every call's `output` ids, in call order.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

from replay.errors import ConfigError, TraceError
from replay.trace.model import Call, Trace, TraceHeader
from replay.trace.validate import check_header
from replay.trace.write import header_to_dict

__all__ = [
    "MIN_CACHED_BYTES",
    "MAX_CACHE_BYTES",
    "default_cache_dir",
    "file_sha256",
    "file_bytes_sha256",
    "load",
    "store",
]

MAGIC = b"replay-trace-cache-1\n"
# Smaller traces parse in a few ms: not worth a file in the cache.
MIN_CACHED_BYTES = 1 << 20
# Oldest entries (by last use) are removed past this total ($REPLAY_TRACE_CACHE_MAX_BYTES), so
# the cache stays bounded.
MAX_CACHE_BYTES = 8 << 30
# A trace file up to this size is read into memory once, hashed, and parsed from those bytes on a
# miss (a parsed trace is larger than its file anyway); a larger one is hashed, then read again.
MAX_HELD_BYTES = 256 << 20
_SUFFIX = ".trace-cache"
# The modules whose code decides what a trace file parses to: an entry written by other code
# (an older or newer replay sharing the cache) is a miss, so a fix to the reader or its checks
# is never hidden behind a trace parsed before it.
_READER_MODULES = ("io", "validate", "fields", "model", "id_arrays", "write", "cache", "schedule")
_reader: str | None = None


def reader_fingerprint() -> str:
    """sha256 of the reader's source files (computed once per process)."""
    global _reader
    if _reader is None:
        h = hashlib.sha256()
        here = Path(__file__).resolve().parent
        for name in _READER_MODULES:
            with contextlib.suppress(OSError):
                h.update((here / f"{name}.py").read_bytes())
        _reader = h.hexdigest()
    return _reader


def max_cache_bytes() -> int:
    """$REPLAY_TRACE_CACHE_MAX_BYTES (a whole number of bytes) or the 8 GiB default."""
    raw = os.environ.get("REPLAY_TRACE_CACHE_MAX_BYTES")
    if raw is None:
        return MAX_CACHE_BYTES
    try:
        value = int(raw.strip())
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigError(
            "$REPLAY_TRACE_CACHE_MAX_BYTES",
            None,
            f"must be a whole number of bytes >= 0 (8 GiB: {MAX_CACHE_BYTES}), got {raw!r}",
        )
    return value


def default_cache_dir() -> Path | None:
    """$REPLAY_TRACE_CACHE (a folder, or `off`), else $XDG_CACHE_HOME/replay/traces, else
    ~/.cache/replay/traces; None when turned off. A bad $REPLAY_TRACE_CACHE_MAX_BYTES is refused
    here, before the trace is read, rather than after the cache entry is written."""
    got = os.environ.get("REPLAY_TRACE_CACHE")
    if got is not None and got.strip().lower() in ("", "0", "off", "no", "false"):
        return None
    max_cache_bytes()
    if got is not None:
        return Path(got)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "replay" / "traces"


def file_sha256(path: Path) -> tuple[str, os.stat_result]:
    """(sha256 hex of the file's bytes, its stat taken before reading)."""
    try:
        st = path.stat()
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError as e:
        raise TraceError(str(path), None, None, f"cannot open: {e.strerror or e}") from None
    return h.hexdigest(), st


def file_bytes_sha256(path: Path) -> tuple[bytes | None, str, os.stat_result]:
    """(the file's bytes, their sha256 hex, its stat taken before reading). The bytes are None
    for a file over MAX_HELD_BYTES: it is hashed in blocks instead, not held."""
    try:
        st = path.stat()
        if st.st_size > MAX_HELD_BYTES:
            return None, file_sha256(path)[0], st
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise TraceError(str(path), None, None, f"cannot open: {e.strerror or e}") from None
    return data, hashlib.sha256(data).hexdigest(), st


def _entry(cache_dir: Path, sha256: str) -> Path:
    return cache_dir / f"{sha256}{_SUFFIX}"


def load(path: Path, sha256: str, size_bytes: int, cache_dir: Path) -> Trace | None:
    """The cached trace of the file with this digest and size, or None (no entry, or an entry
    that is not exactly that trace's)."""
    entry = _entry(cache_dir, sha256)
    try:
        with open(entry, "rb") as f:
            buf = bytearray(os.fstat(f.fileno()).st_size)
            if f.readinto(buf) != len(buf):
                return None
    except OSError:
        return None
    with contextlib.suppress(OSError):  # a cache shared read-only is still read
        os.utime(entry)  # last use, for the eviction order
    try:
        return _decode(buf, path, sha256, size_bytes)
    except (ValueError, KeyError, TypeError, IndexError, orjson.JSONDecodeError, TraceError):
        return None  # a damaged entry, or another layout: parse the trace instead


def _decode(buf: bytearray, path: Path, sha256: str, size_bytes: int) -> Trace | None:
    if not buf.startswith(MAGIC):
        return None
    at = len(MAGIC)
    meta_len = int.from_bytes(buf[at : at + 8], "little")
    at += 8
    meta = orjson.loads(bytes(buf[at : at + meta_len]))
    if meta["sha256"] != sha256 or meta["size_bytes"] != size_bytes:
        return None
    if meta.get("reader") != reader_fingerprint():
        return None  # written by other reader code: parse the trace again
    at = _aligned(at + meta_len)
    header = check_header(meta["header"], str(path))
    id_dtype = np.dtype(meta["append_dtype"])
    n_append, n_output = meta["append_ids"], meta["output_ids"]
    if at + n_append * id_dtype.itemsize + n_output * 4 != len(buf):
        return None
    appends = np.frombuffer(buf, id_dtype, n_append, at)
    outputs = np.frombuffer(buf, np.int32, n_output, at + n_append * id_dtype.itemsize)
    calls, a, o = [], 0, 0
    for d in meta["calls"]:
        na, no = d.pop("n_append"), d.pop("n_output")
        append = appends[a : a + na]
        a += na
        output = None
        if no >= 0:
            output = outputs[o : o + no]
            o += no
        d["after"] = tuple((t, i) for t, i in d["after"])
        if d["parent"] is not None:
            d["parent"] = tuple(d["parent"])
        calls.append(Call(append=append, output=output, **d))
    if a != n_append or o != n_output:
        return None
    return Trace(header, calls, path=str(path), sha256=sha256)


def _aligned(n: int) -> int:
    return (n + 7) // 8 * 8


def _encode(trace: Trace, sha256: str, size_bytes: int) -> list[bytes]:
    header: TraceHeader = trace.header
    id_dtype = np.dtype(np.int64 if header.tokens == "blocks" else np.int32)
    calls = []
    for c in trace.calls:
        calls.append({
            "task": c.task, "index": c.index, "gap_s": c.gap_s, "keep": c.keep,
            "prompt_len": c.prompt_len, "output_len": c.output_len,
            "after": [list(r) for r in c.after], "at_s": c.at_s, "tail_gap_s": c.tail_gap_s,
            "recorded": c.recorded, "ns": c.ns,
            "parent": None if c.parent is None else list(c.parent), "line": c.line,
            "n_append": len(c.append), "n_output": -1 if c.output is None else len(c.output),
        })  # fmt: skip
    appends = [np.ascontiguousarray(c.append, id_dtype) for c in trace.calls]
    outputs = [
        np.ascontiguousarray(c.output, np.int32) for c in trace.calls if c.output is not None
    ]
    meta = orjson.dumps({
        "sha256": sha256, "size_bytes": size_bytes, "reader": reader_fingerprint(),
        "header": header_to_dict(header),
        "append_dtype": id_dtype.str, "append_ids": sum(map(len, appends)),
        "output_ids": sum(map(len, outputs)), "calls": calls,
    })  # fmt: skip
    head = MAGIC + len(meta).to_bytes(8, "little") + meta
    pad = b"\0" * (_aligned(len(head)) - len(head))
    return [head + pad, *(a.tobytes() for a in appends), *(o.tobytes() for o in outputs)]


def store(trace: Trace, sha256: str, size_bytes: int, cache_dir: Path) -> bool:
    """Write the entry atomically (a reader sees the whole entry or none); False when the cache
    folder cannot be written (a read-only home, a full disk): the run goes on without it."""
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=".", suffix=".tmp")
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as f:
            for part in _encode(trace, sha256, size_bytes):
                f.write(part)
        os.replace(tmp, _entry(cache_dir, sha256))
    except OSError:
        Path(tmp).unlink(missing_ok=True)
        return False
    _evict(cache_dir, sha256, max_cache_bytes())
    return True


def _evict(cache_dir: Path, keep: str, max_bytes: int) -> None:
    """Remove the least recently used entries (not `keep`) while the cache holds more than
    `max_bytes`."""
    entries = []
    for e in os.scandir(cache_dir):
        if e.name.endswith(".tmp"):  # left by a writer that was killed: gone after a day
            with contextlib.suppress(OSError):
                if e.stat().st_mtime < time.time() - 86400:
                    os.unlink(e.path)
        elif e.name.endswith(_SUFFIX) and not e.name.startswith(keep):
            try:
                st = e.stat()
            except OSError:
                continue  # removed by another process meanwhile
            entries.append((st.st_mtime, st.st_size, e.path))
    total = sum(size for _, size, _ in entries)
    try:
        total += _entry(cache_dir, keep).stat().st_size
    except OSError:
        return  # the new entry is gone already: another process is evicting
    for _, size, entry in sorted(entries):
        if total <= max_bytes:
            break
        Path(entry).unlink(missing_ok=True)
        total -= size
