"""EfficientAgent `replay_trace.v1` directories -> v1 ids trace.

Layout (the study's release, efficientagent/replay/build_trace.py): `trace_manifest.json` (schema
`efficientagent.replay_trace.v1`, `files`) plus one `NNN_<task>.jsonl.gz` per task. A task file's
first line is its header (`instance_id`, `order`, `tail_gap_s`, `recorded_jct_s`); each further
line is a call (`seq`, `gap_before_s`, `prompt_shared` = tokens kept from the previous *prompt*,
`prompt_suffix` ids, `prompt_len`, `output` ids, `output_len`, `recorded_client_elapsed_s`,
`prompt_sha256`). Our `keep` counts tokens of the previous *context* (prompt + output), so when a
call keeps the whole previous prompt and its suffix starts with the previous output, those output
tokens move into `keep`: same prompt, smaller delta. Tasks are ordered by `order`, then
`instance_id`.

`prompt_sha256`, when present, is checked against the prompt rebuilt from the deltas, so a damaged
or mis-assembled file fails at import rather than replaying other prompts than were recorded.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import orjson

from replay.errors import TraceError
from replay.trace.importers.common import (
    call_lengths,
    expand_sources,
    iter_jsonl,
    load_json,
    token_ids,
)
from replay.trace.model import Call, Trace, TraceHeader
from replay.trace.stats import common_prefix_len

__all__ = ["import_efficientagent", "prompt_sha256", "MANIFEST_NAME", "SCHEMA"]

MANIFEST_NAME = "trace_manifest.json"
SCHEMA = "efficientagent.replay_trace.v1"
_HEX64 = re.compile(r"[0-9a-f]{64}")


def prompt_sha256(prompt: np.ndarray) -> str:
    """The release's prompt digest: SHA-256 of the prompt's ids as Python's `json.dumps` writes a
    list of ints, ASCII, `[1, 2, 3]` (comma and one space between ids, none inside the brackets).
    The release computes `hashlib.sha256(json.dumps(p).encode())` over the prompt id list `p`
    (efficientagent/replay/build_trace.py `build_task`, and synthetic_trace.py `generate`).
    orjson writes `[1,2,3]`; ids hold no commas, so adding the space after each comma gives the
    same bytes at a fraction of json.dumps' time on 100K-token prompts."""
    text = orjson.dumps(np.ascontiguousarray(prompt), option=orjson.OPT_SERIALIZE_NUMPY)
    return hashlib.sha256(text.replace(b",", b", ")).hexdigest()


def _check_sha256(row: dict, prompt: np.ndarray, file: str, line: int) -> None:
    want = row.get("prompt_sha256")
    if want is None:
        return
    if not isinstance(want, str) or not _HEX64.fullmatch(want):
        raise TraceError(
            file, line, "prompt_sha256", "is not 64 lower-case hex digits; fix or drop the field"
        )
    got = prompt_sha256(prompt)
    if got != want:
        raise TraceError(
            file,
            line,
            "prompt_sha256",
            f"{want[:12]}... does not match the prompt rebuilt from prompt_shared + "
            f"prompt_suffix ({got[:12]}...: SHA-256 of the ids written '[1, 2, 3]'); the file "
            "is damaged or its deltas are wrong: rebuild it with the release's build_trace",
        )


def _nonneg_int(obj: dict, key: str, file: str, line: int) -> int:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise TraceError(file, line, key, "missing or not a non-negative integer")
    return v


def _seconds(obj: dict, key: str, file: str, line: int, required: bool = True) -> float | None:
    v = obj.get(key)
    if v is None and not required:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not v >= 0:
        raise TraceError(file, line, key, "missing or not a number of seconds >= 0")
    return float(v)


def _task(path: Path, data: bytes | None = None) -> tuple[tuple[float, str], list[Call]]:
    file = str(path)
    rows = iter_jsonl(path, data)
    first = next(rows, None)
    if first is None:
        raise TraceError(file, 1, None, "empty task file")
    lineno, head = first
    if not isinstance(head.get("instance_id"), str):
        raise TraceError(file, lineno, "instance_id", "missing: the first line is the task header")
    task = head["instance_id"]
    order = head.get("order", 0)
    if isinstance(order, bool) or not isinstance(order, int | float):
        raise TraceError(file, lineno, "order", "must be a number")
    tail_gap = _seconds(head, "tail_gap_s", file, lineno, required=False)
    jct = _seconds(head, "recorded_jct_s", file, lineno, required=False)
    calls: list[Call] = []
    prev_prompt = np.empty(0, np.int32)
    prev_out = np.empty(0, np.int32)
    last_seq = -1
    for lineno, row in rows:
        seq = _nonneg_int(row, "seq", file, lineno)
        index = len(calls)
        if seq <= last_seq:
            raise TraceError(file, lineno, "seq", f"{seq} does not increase (previous {last_seq})")
        last_seq = seq
        shared = _nonneg_int(row, "prompt_shared", file, lineno)
        if shared > len(prev_prompt):
            raise TraceError(
                file, lineno, "prompt_shared", f"{shared} > previous prompt {len(prev_prompt)}"
            )
        suffix = token_ids(row, "prompt_suffix", file, lineno)
        prompt_len = _nonneg_int(row, "prompt_len", file, lineno)
        if prompt_len != shared + len(suffix):
            raise TraceError(
                file, lineno, "prompt_len", f"{prompt_len} != prompt_shared + len(prompt_suffix)"
            )
        output = token_ids(row, "output", file, lineno)
        output_len = row.get("output_len", len(output))
        if output_len != len(output):
            raise TraceError(file, lineno, "output_len", f"{output_len} != len(output)")
        call_lengths(file, lineno, ("prompt_len", prompt_len), ("output", len(output)))
        prompt = np.concatenate([prev_prompt[:shared], suffix])
        _check_sha256(row, prompt, file, lineno)
        keep, append = shared, suffix
        if shared == len(prev_prompt) and len(prev_out):
            extra = common_prefix_len(suffix, prev_out)
            keep, append = shared + extra, suffix[extra:]
        calls.append(
            Call(
                task=task,
                index=index,
                gap_s=float(_seconds(row, "gap_before_s", file, lineno) or 0.0),
                keep=keep,
                append=append,
                prompt_len=prompt_len,
                output_len=len(output),
                output=output,
                line=lineno,
            )
        )
        prev_prompt = prompt
        prev_out = output
    if not calls:
        raise TraceError(file, None, None, "task has a header but no calls")
    if tail_gap is not None or jct is not None:
        rec = {"task_jct_s": jct} if jct is not None else None
        calls[-1] = replace(calls[-1], tail_gap_s=tail_gap, recorded=rec)
    return (float(order), task), calls


def _check_file_digests(manifest: Path, entries: object) -> dict[Path, bytes]:
    """Each task file the manifest lists must be there with the bytes it was built with: the
    release records SHA-256 of every `NNN_<task>.jsonl.gz` as written (build_trace.py `build`), so
    a missing, truncated or edited file fails here instead of replaying a different workload.
    Returns the bytes it hashed, by resolved path, so the parse reads each file once."""
    read: dict[Path, bytes] = {}
    if entries is None:
        return read
    if not isinstance(entries, list):
        raise TraceError(str(manifest), None, "files", "must be a list of task file entries")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
            raise TraceError(str(manifest), None, f"files[{i}].file", "must name a task file")
        want = entry.get("sha256")
        path = manifest.parent / entry["file"]
        if not path.is_file():
            raise TraceError(
                str(manifest),
                None,
                f"files[{i}].file",
                f"{entry['file']} is listed but missing; copy it next to the manifest",
            )
        if want is None:
            continue
        if not isinstance(want, str) or not _HEX64.fullmatch(want):
            raise TraceError(
                str(manifest), None, f"files[{i}].sha256", "is not 64 lower-case hex digits"
            )
        data = path.read_bytes()
        got = hashlib.sha256(data).hexdigest()
        if got != want:
            raise TraceError(
                str(path),
                None,
                "sha256",
                f"the file hashes to {got[:12]}..., the manifest lists {want[:12]}...; "
                "the file was changed or damaged: copy it again or rebuild the trace",
            )
        read[path.resolve()] = data
    return read


def import_efficientagent(
    sources: Sequence[str | os.PathLike], vocab_size: int | None = None
) -> Trace:
    """Import `replay_trace.v1` directories (or task files) into one ids trace."""
    # the manifest named itself stands for its directory (it was read as a task file and
    # refused as invalid JSON)
    sources = [Path(s).parent if Path(s).name == MANIFEST_NAME else s for s in sources]
    manifest: dict = {}
    hashed: dict[Path, bytes] = {}
    listed: dict[Path, set[Path]] = {}  # a manifest's folder -> the task files it lists
    vocab_from = MANIFEST_NAME
    for s in sources:
        m = Path(s) / MANIFEST_NAME
        if m.is_file():
            data = load_json(m)
            if not isinstance(data, dict):
                raise TraceError(str(m), None, None, "the manifest must be a JSON object")
            schema = data.get("schema", SCHEMA)
            if schema != SCHEMA:
                raise TraceError(
                    str(m), None, "schema", f"is {schema!r}; this importer reads {SCHEMA!r}"
                )
            hashed.update(_check_file_digests(m, data.get("files")))
            if isinstance(data.get("files"), list):
                listed[m.parent.resolve()] = {
                    (m.parent / e["file"]).resolve() for e in data["files"]
                }
            if "vocab_size" in data and "vocab_size" not in manifest:
                vocab_from = str(m)
            manifest = {**data, **manifest}
    files = expand_sources(sources, "*.jsonl.gz")
    if not files:
        raise TraceError(", ".join(map(str, sources)), None, None, "no task *.jsonl.gz files")
    for f in files:  # a file beside the release's own is another workload, with no digest
        where = f.resolve()
        if where.parent in listed and where not in listed[where.parent]:
            raise TraceError(
                str(f), None, None,
                f"is not one of the task files {MANIFEST_NAME} lists; move it out of the "
                "folder or rebuild the trace",
            )  # fmt: skip
    tasks = sorted(
        (_task(p, hashed.pop(Path(p).resolve(), None)) for p in files), key=lambda kv: kv[0]
    )
    calls = [c for _, cs in tasks for c in cs]
    seen: set[str] = set()
    for (_, task), _cs in tasks:
        if task in seen:
            raise TraceError(", ".join(map(str, sources)), None, "instance_id", f"{task!r} twice")
        seen.add(task)
    max_id = max(
        [int(c.append.max()) for c in calls if len(c.append)]
        + [int(c.output.max()) for c in calls if c.output is not None and len(c.output)]
        + [0]
    )
    vocab = vocab_size or manifest.get("vocab_size") or max_id + 1
    if not isinstance(vocab, int) or vocab <= max_id:
        # the user's flag, or the manifest that gave it (by its path, not its bare name)
        file, field = ("trace import", "--vocab-size") if vocab_size else (vocab_from, "vocab_size")
        raise TraceError(file, None, field, f"{vocab} does not cover token id {max_id}")
    model = manifest.get("model") if isinstance(manifest.get("model"), str) else None
    header = TraceHeader(
        tokens="ids",
        vocab_size=vocab,
        model=model,
        source="efficientagent",
        meta={
            k: v for k, v in manifest.items() if k in ("schema", "format", "tokenizer", "dataset")
        },
    )
    return Trace(header, calls)
