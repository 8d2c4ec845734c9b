"""The `--cache-ram` sweep of experiments/llamacpp-cpu.toml through `replay sweep` and `replay report`,
checked against the whole-prompt model's pre-registered prediction.

What is asserted, and why these tolerances:
- every run is ok, with prompt and completion lengths checked per call (`strict = true`);
- with the tier off, computed prefill is everything beyond the slots' own reuse: the model replayed
  on each run's observed send/end times gives the same computed prefill (within 8% of the prompt
  tokens: a send and its admission by the server differ by milliseconds, enough to swap two calls
  that arrive together);
- it falls to near the trace's unavoidable prefill (the distinct tokens of the tasks' last prompts,
  a head they share counted once: everything else can be
  reused) once the tier holds the working set: within 20% above it, the room the server's own
  choice of a stale, shorter entry leaves (the model's floor is already up to 8% above);
- the transition is where the model put it before the runs: the measured halfway point (computed
  prefill halfway between its values at the smallest and the largest size, interpolated on the
  sweep's grid) lies inside the halfway points the model predicts for server speeds from 0.25x to
  2x its idle-machine calibration, widened by a quarter of the grid step. The a-priori call order
  depends on how fast the server runs on the machine at hand, which the model cannot know; that
  range is the model's own uncertainty, not a fudge factor. Each point's mean also lies inside the
  predicted band at that size, widened by 10% of the off-to-floor swing for repeat-to-repeat noise.

Marker `llamacpp`: deselected by `make test`, run by `make test-llamacpp`.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from replay.model.wholeprompt import WholePromptConfig, simulate_timed
from replay.model.wholeprompt_loop import halfway_mib
from replay.sweep.config import load_experiment
from replay.sweep.prepare import load_trace
from replay.trace.stats import common_prefix_len
from tests.real.conftest_llamacpp import (
    BYTES_PER_TOKEN,
    OVERHEAD_BYTES,
    REPO,
    env_with_cache,
    observed_events,
    read_calls,
    read_json,
    require_xllamacpp,
)

pytestmark = pytest.mark.llamacpp

EXPERIMENT = REPO / "experiments" / "llamacpp-cpu.toml"


def test_cache_ram_sweep_matches_the_whole_prompt_model(tmp_path):
    require_xllamacpp()
    shutil.copy(EXPERIMENT, tmp_path / "llamacpp-cpu.toml")
    env = env_with_cache(tmp_path / "cache")
    replay = [sys.executable, "-m", "replay.cli.main"]
    sweep = subprocess.run(
        [*replay, "sweep", "llamacpp-cpu.toml"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert sweep.returncode == 0, sweep.stdout + sweep.stderr
    exp_dir = tmp_path / "results" / "llamacpp-cpu"
    report = subprocess.run(
        [*replay, "report", str(exp_dir)], env=env, capture_output=True, text=True, timeout=120
    )
    assert report.returncode == 0, report.stdout + report.stderr
    report_md = (exp_dir / "report.md").read_text()
    assert "host_tier_gib" in report_md

    exp = load_experiment(EXPERIMENT)
    trace = load_trace(exp)
    summary = pd.read_parquet(exp_dir / "summary.parquet")
    assert (summary["status"] == "ok").all(), summary[["point", "repeat", "status", "reason"]]
    assert (summary["prompt_mismatches"] == 0).all() and (
        summary["completion_mismatches"] == 0
    ).all()
    summary["mib"] = (summary["host_tier_gib"] * 1024).round().astype(int)

    # each run, explained by the model from its own observed call times
    for row in summary.itertuples(index=False):
        run_dir = exp_dir / row.point / f"r{row.repeat}"
        cfg = WholePromptConfig(2, int(row.mib), BYTES_PER_TOKEN, OVERHEAD_BYTES, ctx_tokens=16384)
        model = simulate_timed(trace, observed_events(read_calls(run_dir)), cfg).totals
        assert abs(model.computed_prefill_tokens - row.computed_prefill_tokens) <= (
            0.08 * trace.prompt_tokens
        ), (row.point, row.repeat, model.computed_prefill_tokens, row.computed_prefill_tokens)

    means = summary.groupby("mib")["computed_prefill_tokens"].mean().sort_index()
    mibs = [int(m) for m in means.index]
    off, top = float(means.iloc[0]), float(means.iloc[-1])
    unavoidable = _distinct_prefix_tokens(trace)
    assert mibs[0] == 0
    assert unavoidable <= top <= 1.2 * unavoidable, (top, unavoidable)
    assert off >= 2 * top, (off, top)

    pred = read_json(exp_dir / "predictions.json")["groups"][0]["prediction"]
    assert pred["model"] == "llamacpp-wholeprompt"
    grid = pred["band_grid_mib"]
    curves = [[curve[grid.index(m)] for m in mibs] for curve in pred["band_curves"]]
    predicted = [h for h in (halfway_mib(mibs, c) for c in curves) if h is not None]
    measured = halfway_mib(mibs, list(means.values))
    step = min(b - a for a, b in zip(mibs, mibs[1:], strict=False))
    assert measured is not None and predicted
    lo, hi = min(predicted) - step / 4, max(predicted) + step / 4
    assert lo <= measured <= hi, (measured, predicted)
    swing = 0.1 * (max(c[0] for c in curves) - min(c[-1] for c in curves))
    for k, m in enumerate(mibs):
        band = (min(c[k] for c in curves) - swing, max(c[k] for c in curves) + swing)
        assert band[0] <= means.loc[m] <= band[1], (m, means.loc[m], band)
    print(
        f"\nllamacpp sweep: computed prefill by --cache-ram MiB {dict(means.round(0))}; "
        f"unavoidable {unavoidable}; halfway measured {measured:.2f} MiB, "
        f"predicted {[round(h, 2) for h in predicted]} (speeds {pred['band']['speed']})"
    )


def _distinct_prefix_tokens(trace) -> int:
    """Tokens in the prefix tree of every task's last prompt: what even a perfect cache computes
    (a head shared across tasks once, each task's own tokens once)."""
    lasts = sorted(
        (list(trace.steps(t))[-1].prompt for t in trace.tasks), key=lambda p: tuple(p.tolist())
    )
    total, prev = 0, np.empty(0, dtype=np.int64)
    for p in lasts:  # in sorted order, each prompt adds what it does not share with the one before
        total += len(p) - common_prefix_len(p, prev)
        prev = p
    return total
