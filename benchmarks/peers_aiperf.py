"""AIPerf 0.13 glue for `make bench-peers`: its input rows, its command line, its results.

What AIPerf 0.13.0 expects, read from the released wheel (paths under `aiperf/`):
- Input: `--custom-dataset-type mooncake_trace` rows (`dataset/loader/models.py`, `MooncakeTrace`)
  with `payload`, a complete request body the transport sends verbatim (no endpoint formatting,
  `dataset/loader/mooncake_trace.py::_build_turn`), so both clients send the same token ids in
  the same body. `timestamp` (ms) puts a row on the fixed schedule (`--fixed-schedule`,
  `--fixed-schedule-auto-offset`: the first row is sent at the phase start,
  `timing/strategies/fixed_schedule.py`); `session_id` names the row's conversation, which the
  per-request export echoes as `conversation_id`. The `raw_payload` loader would also send
  bodies verbatim but demands a chat `messages` array (`dataset/loader/raw_payload.py`).
- Responses: a completions chunk counts only with `"object": "text_completion"`
  (`endpoints/openai_completions.py::parse_response`); `--use-server-token-count` takes token
  counts from the usage chunk, so the tokenizer is loaded but never runs on the 100K-id prompts.
- Tokenizer: `--tokenizer NAME` is loaded with transformers' AutoTokenizer. With
  `HF_HUB_OFFLINE=1`, 0.13 looks NAME up in the Hugging Face cache only, local directories
  included (`common/tokenizer.py::_resolve_local_snapshot`), so the tiny tokenizer is laid out
  as a cached repo (benchmarks/peers_tokenizer.py) and no hub is contacted.
- Results: `profile_export.jsonl`, one line per request with `metadata.request_start_ns` /
  `request_end_ns` (wall clock, `time.time_ns`) and `error`; `profile_export_aiperf.json` with
  `start_time`, the profiling phase's start (the fixed schedule's zero) as a local ISO time.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

import orjson

from replay.trace.model import Trace

AIPERF_VERSION = "0.13.0"
TOKENIZER_REPO = "replay/tiny-tokenizer"  # the name the cached tiny tokenizer answers to


def body(model: str, user: str, prompt: list[int], output_tokens: int) -> dict:
    """The request body replay's transports send for a call, `prompt` last (the zero server
    reads the fields before it and counts the ids after it)."""
    return {
        "model": model, "max_tokens": output_tokens, "min_tokens": output_tokens,
        "ignore_eos": True, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True}, "user": user, "prompt": prompt,
    }  # fmt: skip


def write_rows(
    trace: Trace,
    path: Path,
    model: str,
    *,
    order: Iterable[int] | None = None,
    speedup: float | None = None,
) -> dict[str, float]:
    """Write the trace's calls as AIPerf mooncake_trace rows with verbatim payloads.

    Each call is its own one-turn session named `c<index>` (index in `trace.calls`). With
    `speedup` the rows carry `timestamp` = (at_s - first at_s) / speedup in ms, the schedule
    AIPerf replays; returns the session -> scheduled offset (ms) map (empty without speedup).
    `order` lists the call indices in the order AIPerf should take them (default: trace order).
    """
    calls = trace.calls
    t0 = min(float(c.at_s or 0.0) for c in calls) if speedup else 0.0
    offsets: dict[str, float] = {}
    with open(path, "wb") as f:
        for i in order if order is not None else range(len(calls)):
            call = calls[i]
            session = f"c{i}"
            row: dict = {"session_id": session, "output_length": int(call.output_len)}
            if speedup:
                offsets[session] = (float(call.at_s or 0.0) - t0) * 1e3 / speedup
                row["timestamp"] = offsets[session]
            row["payload"] = body(
                model, call.task, trace.prompt(call).tolist(), int(call.output_len)
            )
            f.write(orjson.dumps(row) + b"\n")
    return offsets


def command(
    aiperf: str,
    url: str,
    rows: Path,
    artifacts: Path,
    *,
    concurrency: int | None,
    requests: int,
    fixed_schedule: bool,
) -> list[str]:
    """`aiperf profile` for the rows (flags from `config/flags/cli_config.py` of 0.13)."""
    argv = [
        aiperf, "profile", "--model", "zero", "--url", url, "--endpoint-type", "completions",
        "--streaming", "--input-file", str(rows), "--custom-dataset-type", "mooncake_trace",
        "--tokenizer", TOKENIZER_REPO, "--use-server-token-count", "--ui-type", "none",
        "--artifact-dir", str(artifacts), "--request-count", str(requests),
    ]  # fmt: skip
    if fixed_schedule:
        argv += ["--fixed-schedule", "--fixed-schedule-auto-offset"]
    else:
        argv += ["--no-fixed-schedule", "--concurrency", str(concurrency)]
    return argv


def read_export(artifacts: Path) -> tuple[list[dict], int]:
    """AIPerf's per-request records (session, start/end ns, error) and the phase start (ns)."""
    records = []
    for n, line in enumerate((artifacts / "profile_export.jsonl").read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        rec = orjson.loads(line)
        meta = rec.get("metadata") or {}
        try:
            records.append({
                "session": meta.get("conversation_id"),
                "start_ns": int(meta["request_start_ns"]),
                "end_ns": int(meta["request_end_ns"]),
                "error": (rec.get("error") or {}).get("type"),
            })  # fmt: skip
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{artifacts}/profile_export.jsonl:{n}: metadata: {e!r}") from e
    summary = orjson.loads((artifacts / "profile_export_aiperf.json").read_bytes())
    start_ns = round(datetime.fromisoformat(summary["start_time"]).timestamp() * 1e6) * 1000
    return records, start_ns


def lateness_s(records: list[dict], start_ns: int, offsets_ms: dict[str, float]) -> list[float]:
    """Send minus scheduled time per request: request_start_ns - (phase start + offset).

    Anchored at the phase start, as replay's `drift_s` is at its clock's start, rather than at
    the least-late request as AIPerf's own `replay_sched_lag_*` are
    (`metrics/replay_sched_lag_analyzer.py`), which would read 0 for the earliest send however
    late it was. The phase start is exported to the microsecond.
    """
    out = []
    for r in records:
        if r["session"] not in offsets_ms:
            raise ValueError(f"AIPerf record for unknown session {r['session']!r}")
        out.append((r["start_ns"] - start_ns) / 1e9 - offsets_ms[r["session"]] / 1e3)
    return out


def rate_per_s(starts_s: list[float], ends_s: list[float]) -> float:
    """Achieved rate: requests over the span from the first send to the last end (both
    clients measured the same way; set-up and teardown are outside the span)."""
    span = max(ends_s) - min(starts_s)
    return len(starts_s) / span if span > 0 else float("nan")
