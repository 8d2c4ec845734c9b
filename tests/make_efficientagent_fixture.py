"""Writes tests/fixtures/efficientagent: a small synthetic trace in the EfficientAgent release's
replay-trace layout, so the importer is tested on the layout the study's tools write, not on a
hand-written approximation of it.

The layout follows the release's `efficientagent/replay/build_trace.py` (`build_task`, `build`):
`trace_manifest.json` with `schema` "efficientagent.replay_trace.v1" and `files` (one entry per
task: order, instance_id, file, sha256, steps, token and gap totals), and `NNN_<task>.jsonl.gz`
per task, NNN its dispatch order: a header line (instance_id, order, tail_gap_s, recorded_jct_s,
calls_total, calls_replayed), then one line per call with `seq` from 1, `gap_before_s`,
`prompt_shared` (tokens kept from the previous prompt), `prompt_suffix`, `prompt_len`, `output`,
`output_len`, `recorded_client_elapsed_s` and `prompt_sha256` (SHA-256 of `json.dumps(prompt)`).
Lines are written with Python's json module, as the release writes them.

The calls come from the project's own generator (`replay synth`, swe-agent preset, scaled down):
run `python tests/make_efficientagent_fixture.py [OUT]` to rewrite the fixture.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import sys
from pathlib import Path

import numpy as np

from replay.trace.model import Trace
from replay.trace.stats import common_prefix_len
from replay.trace.synth import synth

FIXTURE_DIR = Path(__file__).resolve().parent / "fixtures" / "efficientagent"
SCHEMA = "efficientagent.replay_trace.v1"
# the generator's arguments: three tasks of four calls, prompts of 40-100 tokens
SYNTH_ARGS = {"tasks": 3, "seed": 7, "scale": 0.01, "max_calls_per_task": 4, "vocab_size": 1000}


def fixture_trace() -> Trace:
    return synth("swe-agent", **SYNTH_ARGS)  # type: ignore[arg-type]


def _gzip_lines(path: Path, rows: list[dict]) -> None:
    """gzip with no name and time 0 in its header, so the same rows give the same bytes."""
    text = "".join(json.dumps(r) + "\n" for r in rows).encode()
    with path.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as z:
        z.write(text)


def _task_rows(trace: Trace, task: str) -> tuple[dict, list[dict]]:
    calls = trace.tasks[task]
    rows = []
    prev = np.empty(0, np.int32)
    for step in trace.steps(task):
        c = step.call
        prompt = step.prompt.tolist()
        shared = common_prefix_len(step.prompt, prev)
        output = step.output.tolist()
        rows.append(
            {
                "seq": c.index + 1,
                "gap_before_s": c.gap_s,
                "prompt_shared": shared,
                "prompt_suffix": prompt[shared:],
                "prompt_len": len(prompt),
                "output": output,
                "output_len": len(output),
                "recorded_client_elapsed_s": 0.0,
                "prompt_sha256": hashlib.sha256(json.dumps(prompt).encode()).hexdigest(),
            }
        )
        prev = step.prompt
    head = {
        "instance_id": task,
        "tail_gap_s": calls[-1].tail_gap_s or 0.0,
        "recorded_jct_s": 0.0,
        "calls_total": len(rows),
        "calls_replayed": len(rows),
    }
    return head, rows


def write_fixture(out: Path, trace: Trace | None = None) -> dict:
    """Write the layout under `out` (created); returns the manifest."""
    trace = trace if trace is not None else fixture_trace()
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for order, task in enumerate(trace.root_task_ids):
        head, rows = _task_rows(trace, task)
        head["order"] = order
        path = out / f"{order:03d}_{re.sub(r'[^A-Za-z0-9_.-]+', '_', task)}.jsonl.gz"
        _gzip_lines(path, [head, *rows])
        files.append(
            {
                "order": order,
                "instance_id": task,
                "file": path.name,
                "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                "steps": len(rows),
                "calls_total": len(rows),
                "prompt_tokens": sum(r["prompt_len"] for r in rows),
                "output_tokens": sum(r["output_len"] for r in rows),
                "gap_total_s": sum(r["gap_before_s"] for r in rows) + head["tail_gap_s"],
                "recorded_jct_s": 0.0,
            }
        )
    manifest = {
        "schema": SCHEMA,
        "synthetic": True,
        "generator": "replay synth swe-agent " + json.dumps(SYNTH_ARGS, sort_keys=True),
        "tasks": len(files),
        "steps": sum(f["steps"] for f in files),
        "prompt_tokens": sum(f["prompt_tokens"] for f in files),
        "output_tokens": sum(f["output_tokens"] for f in files),
        "gap_total_s": sum(f["gap_total_s"] for f in files),
        "task_list_sha256": hashlib.sha256(
            json.dumps([f["instance_id"] for f in files]).encode()
        ).hexdigest(),
        "files": files,
    }
    (out / "trace_manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


if __name__ == "__main__":
    write_fixture(Path(sys.argv[1]) if len(sys.argv) > 1 else FIXTURE_DIR)
