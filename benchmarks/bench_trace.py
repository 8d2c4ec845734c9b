"""Trace layer at paper scale (swe-agent, ~4,400 calls, ~147M prompt tokens).

Ours: the delta-encoded v1 file, written, read (validated) and expanded task by task.
Baseline: the same prompts stored expanded, as a file of full prompts would hold them (int32
bytes, and the JSON text a full-prompt JSONL needs, measured on a sample of calls and scaled).
The ratios show what the delta encoding saves in file size and reader memory.
"""

from __future__ import annotations

import gc
import tempfile
import time
import tracemalloc
from pathlib import Path

import orjson

from replay.trace.io import read_trace, write_trace
from replay.trace.stats import trace_stats
from replay.trace.synth import synth


def _full_prompt_json_bytes(trace, sample_tasks: int = 5) -> float:
    """Bytes of a JSONL holding every prompt expanded, extrapolated from a few tasks."""
    tokens = size = 0
    for task in list(trace.tasks)[:sample_tasks]:
        for s in trace.steps(task):
            size += len(orjson.dumps({"prompt": s.prompt.tolist()})) + 1
            tokens += len(s.prompt)
    return size / tokens * trace.prompt_tokens


def run() -> dict:
    t0 = time.perf_counter()
    trace = synth("swe-agent")
    synth_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "swe-agent.jsonl.gz"
        t0 = time.perf_counter()
        write_trace(trace, path)
        write_s = time.perf_counter() - t0
        file_bytes = path.stat().st_size
        del trace
        gc.collect()
        t0 = time.perf_counter()
        back = read_trace(path)
        read_s = time.perf_counter() - t0
        del back
        gc.collect()
        tracemalloc.start()
        back = read_trace(path)
        _, reader_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    t0 = time.perf_counter()
    expanded_tokens = 0
    for task in back.tasks:
        for s in back.steps(task):
            expanded_tokens += len(s.prompt)
    expand_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    stats = trace_stats(back)
    stats_s = time.perf_counter() - t0
    expanded_bytes = expanded_tokens * 4  # int32 ids
    full_json = _full_prompt_json_bytes(back)
    return {
        "trace": "synth swe-agent (default tasks, seed 0)",
        "calls": stats.calls,
        "prompt_tokens": stats.prompt_tokens,
        "unique_tokens": stats.unique_tokens,
        "reuse_fraction": round(stats.reuse_fraction or 0.0, 4),
        "synth_s": round(synth_s, 3),
        "write_s": round(write_s, 3),
        "read_s": round(read_s, 3),
        "expand_all_prompts_s": round(expand_s, 3),
        "stats_s": round(stats_s, 3),
        "file_bytes": file_bytes,
        "reader_peak_bytes": reader_peak,
        "baseline_expanded_prompt_bytes_int32": expanded_bytes,
        "baseline_full_prompt_jsonl_bytes_est": int(full_json),
        "ratio_expanded_int32_over_reader_peak": round(expanded_bytes / reader_peak, 1),
        "ratio_full_jsonl_over_file": round(full_json / file_bytes, 1),
    }


if __name__ == "__main__":
    print(orjson.dumps(run(), option=orjson.OPT_INDENT_2).decode())
