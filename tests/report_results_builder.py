"""Build results directories that follow docs/results.md, for the analysis/plots/report tests.

Numbers are whatever a test passes in; nothing here imports `replay`, so the layout written is an
independent reading of the contract, not the code under test echoing itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

CANONICAL = (
    "prompt_tokens",
    "output_tokens",
    "device_hit_tokens",
    "host_restore_tokens",
    "computed_prefill_tokens",
    "host_write_tokens",
    "host_evicted_tokens",
    "preemptions",
)


def point_name(point: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in point.items())


def make_calls(
    slots: int,
    calls_per_slot: int,
    *,
    gap_s: float = 0.5,
    wait_s: float = 0.01,
    prefill_s: float = 0.2,
    decode_s: float = 0.3,
) -> list[dict[str, Any]]:
    """Closed-loop-looking call rows: per slot, calls one after another separated by `gap_s`."""
    rows = []
    for slot in range(slots):
        t = 0.05 * slot
        for i in range(calls_per_slot):
            ready = t
            send = ready + wait_s
            first = send + prefill_s * (1 + 0.1 * slot)
            end = first + decode_s
            rows.append(
                {
                    "task": f"t{slot}",
                    "call": i,
                    "slot": slot,
                    "t_ready": ready,
                    "t_send": send,
                    "t_first_token": first,
                    "t_end": end,
                    "drift_s": send - ready,
                    "prompt_tokens": 1000,
                    "prompt_tokens_reported": 1000,
                    "max_tokens": 10,
                    "completion_tokens": 10,
                    "cached_tokens": None,
                    "device_hit_tokens": None,
                    "host_restore_tokens": None,
                    "exact_match": None,
                    "status": "ok",
                    "error_kind": None,
                    "error": None,
                }
            )
            t = end + gap_s
    return rows


def write_run(
    exp_dir: Path,
    point: dict[str, Any],
    repeat: int,
    *,
    summary: dict[str, Any],
    counters: dict[str, Any] | None = None,
    status: str = "ok",
    calls: list[dict[str, Any]] | None = None,
    calls_format: str = "parquet",
    experiment: str | None = None,
    error: str | None = None,
    provenance: dict[str, Any] | None = None,
    engine: str = "sim",
) -> Path:
    run_dir = exp_dir / point_name(point) / f"r{repeat}"
    run_dir.mkdir(parents=True, exist_ok=True)
    run = {
        "status": status,
        "summary": summary,
        "provenance": provenance
        or {
            "trace": {"path": "traces/t.jsonl.gz", "sha256": "ab" * 32},
            "engine": {"name": engine, "engine_version": "0.1.0"},
            "git_revision": "deadbeef",
            "host": "ci",
            "started_at": "2026-12-01T10:00:00Z",
            "ended_at": "2026-12-01T10:01:00Z",
        },
        "config": {"pool": 4},
        "experiment": experiment or exp_dir.name,
        "point": point,
        "repeat": repeat,
        "engine": engine,
    }
    if error:
        run["error"] = error
    (run_dir / "run.json").write_text(json.dumps(run))
    if counters is not None:
        (run_dir / "counters.json").write_text(json.dumps(counters))
    if calls is not None:
        if calls_format == "parquet":
            pd.DataFrame(calls).to_parquet(run_dir / "calls.parquet")
        else:
            (run_dir / "calls.jsonl").write_text("".join(json.dumps(c) + "\n" for c in calls))
    return run_dir


def write_predictions(exp_dir: Path, groups: list[tuple[str, dict[str, Any]]]) -> None:
    """predictions.json as the sweep stores it: one entry per group key with its prediction."""
    doc = {
        "experiment": exp_dir.name,
        "tier_key": "host_tier_gib",
        "groups": [
            # A group the model could not predict carries `skipped` instead of `prediction`.
            {
                "key": key,
                "points": [],
                "inputs": {"pool": 4},
                **(pred if "skipped" in pred else {"prediction": pred}),
            }
            for key, pred in groups
        ],
    }
    (exp_dir / "predictions.json").write_text(json.dumps(doc))


def tier_sweep(exp_dir: Path, *, with_failure: bool = True, calls: bool = True) -> Path:
    """A small sweep: host tier 0/5/20 x admission all/conditioned x 3 repeats, plus predictions.

    Makespans: at 5 GiB `conditioned` is clearly faster than `all` (real); at 20 GiB the two
    overlap (noise only). With `with_failure`, one repeat at 20 GiB/all failed.
    """
    exp_dir.mkdir(parents=True, exist_ok=True)
    (exp_dir / "experiment.toml").write_text('name = "tiny"\nrepeats = 3\n')
    makespans = {
        (0, "all"): [100.0, 101.0, 99.0],
        (5, "all"): [90.0, 91.0, 89.0],
        (5, "conditioned"): [80.0, 80.5, 79.5],
        (20, "all"): [60.0, 62.0, 58.0],
        (20, "conditioned"): [61.0, 59.0, 60.5],
    }
    prefill = {0: 1_000_000, 5: 700_000, 20: 100_000}
    for (tier, admission), values in makespans.items():
        for r, m in enumerate(values):
            point = {"host_tier_gib": tier, "admission": admission}
            cp = (
                prefill[tier] * (0.65 if admission == "conditioned" and tier == 5 else 1.0)
                + r * 1000
            )
            restore = 0.0 if tier == 0 else (1_000_000 - cp) * 0.7
            summary = {
                "makespan_s": m,
                "calls": 8,
                "errors": 0,
                "prompt_tokens": 1_000_000,
                "output_tokens": 800,
                "ttft_p50_s": 0.2 + tier / 100,
                "ttft_p99_s": 0.5,
            }
            counters = {
                "prompt_tokens": 1_000_000,
                "device_hit_tokens": 1_000_000 - cp - restore,
                "host_restore_tokens": restore,
                "computed_prefill_tokens": cp,
                "host_write_tokens": 0 if tier == 0 else 3 * restore,
                "host_evicted_tokens": None,
                "preemptions": 0,
                "chunks_written": 40,
                "chunks_evicted_unread": 10,
            }
            failed = with_failure and (tier, admission, r) == (20, "all", 2)
            write_run(
                exp_dir,
                point,
                r,
                summary=summary if not failed else {"calls": 3, "errors": 0},
                counters=counters if not failed else None,
                status="failed" if failed else "ok",
                error="server gone: connection refused for 30 s" if failed else None,
                calls=make_calls(2, 4 if not failed else 1, prefill_s=0.2 + tier / 100)
                if calls
                else None,
            )
    write_predictions(
        exp_dir,
        [
            (
                "admission=all",
                {
                    "working_set_gib": 8.0,
                    "tiers": [
                        {
                            "host_tier_gib": 0,
                            "computed_prefill_tokens": 1_000_000,
                            "host_restore_tokens": 0,
                            "host_write_tokens": 0,
                            "host_coverage_tokens": 0,
                        },
                        {
                            "host_tier_gib": 5,
                            "computed_prefill_tokens": 735_000,
                            "host_restore_tokens": 140_000,
                            "host_write_tokens": 400_000,
                            "host_coverage_tokens": 150_000,
                        },
                        {
                            "host_tier_gib": 20,
                            "computed_prefill_tokens": 101_000,
                            "host_restore_tokens": 450_000,
                            "host_write_tokens": 1_300_000,
                            "host_coverage_tokens": 460_000,
                        },
                    ],
                },
            ),
            ("admission=conditioned", {"skipped": "model covers admission all only"}),
        ],
    )
    return exp_dir
