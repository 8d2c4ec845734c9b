"""The `--cache-ram` sweep set-up the llama.cpp tier's sweep tests share (test_llamacpp_sweep.py on
a synthetic trace, test_llamacpp_weka.py on a scaled WEKA trace): run `replay sweep` and `replay
report` on an experiment file as a user would, check that every run is clean and that the
whole-prompt model replayed on each run's own observed call times explains it, and hand back the
per-size results next to the sweep's pre-registered prediction at the swept sizes.

The per-run check's tolerance, 8% of the prompt tokens: the model sees when the client sent and
received each call, not when the server admitted it; those differ by milliseconds, enough to swap
two calls that arrive together and so which of them finds its slot.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from replay.model.wholeprompt import WholePromptConfig, simulate_timed
from replay.sweep.config import load_experiment
from replay.sweep.prepare import load_trace
from replay.trace.model import Trace
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

__all__ = ["CacheRamSweep", "run_cache_ram_sweep", "distinct_prefix_tokens"]

OBSERVED_TOLERANCE = 0.08  # of the prompt tokens; see the module docstring


@dataclass(frozen=True)
class CacheRamSweep:
    """A finished sweep: its runs, their means by size, and what the model said before."""

    trace: Trace
    exp_dir: Path
    summary: pd.DataFrame  # one row per run, with `mib` (--cache-ram in MiB)
    means: pd.Series  # mean computed prefill tokens by `mib`, ascending
    prediction: dict  # predictions.json's prediction for the sweep's one group
    curves: list[list[float]]  # predicted computed prefill at each swept size, one per speed

    @property
    def mibs(self) -> list[int]:
        return [int(m) for m in self.means.index]

    def predicted_range(self, k: int) -> tuple[float, float]:
        """The lowest and highest computed prefill the model predicted at the k-th size."""
        return min(c[k] for c in self.curves), max(c[k] for c in self.curves)


def run_cache_ram_sweep(
    experiment: Path, tmp_path: Path, *, timeout_s: float = 400
) -> CacheRamSweep:
    """Sweep `experiment` into `tmp_path/results`, report it, and check each run (module docstring)."""
    require_xllamacpp()
    env = env_with_cache(tmp_path / "cache")
    replay = [sys.executable, "-m", "replay.cli.main"]
    results = tmp_path / "results"
    sweep = subprocess.run(
        [*replay, "sweep", str(experiment), "--results", str(results)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s,
    )  # fmt: skip
    assert sweep.returncode == 0, sweep.stdout[-2000:] + sweep.stderr[-3000:]
    exp = load_experiment(experiment)
    exp_dir = results / exp.name
    report = subprocess.run(
        [*replay, "report", str(exp_dir)], env=env, capture_output=True, text=True, timeout=120
    )
    assert report.returncode == 0, report.stdout + report.stderr
    assert "host_tier_gib" in (exp_dir / "report.md").read_text()

    trace = load_trace(exp)
    summary = pd.read_parquet(exp_dir / "summary.parquet")
    assert (summary["status"] == "ok").all(), summary[["point", "repeat", "status", "reason"]]
    assert (summary["prompt_mismatches"] == 0).all()
    assert (summary["completion_mismatches"] == 0).all()
    assert (summary["prompt_tokens"] == trace.prompt_tokens).all()
    summary["mib"] = (summary["host_tier_gib"] * 1024).round().astype(int)

    options = dict(exp.engine_options)
    slots, ctx_tokens = int(options["slots"]), int(options["ctx_tokens"])
    for row in summary.itertuples(index=False):
        run_dir = exp_dir / row.point / f"r{row.repeat}"
        cfg = WholePromptConfig(slots, int(row.mib), BYTES_PER_TOKEN, OVERHEAD_BYTES, ctx_tokens)
        model = simulate_timed(trace, observed_events(read_calls(run_dir)), cfg).totals
        assert abs(model.computed_prefill_tokens - row.computed_prefill_tokens) <= (
            OBSERVED_TOLERANCE * trace.prompt_tokens
        ), (row.point, row.repeat, model.computed_prefill_tokens, row.computed_prefill_tokens)

    means = summary.groupby("mib")["computed_prefill_tokens"].mean().sort_index()
    prediction = read_json(exp_dir / "predictions.json")["groups"][0]["prediction"]
    assert prediction["model"] == "llamacpp-wholeprompt"
    grid = prediction["band_grid_mib"]
    curves = [
        [curve[grid.index(int(m))] for m in means.index] for curve in prediction["band_curves"]
    ]
    return CacheRamSweep(trace, exp_dir, summary, means, prediction, curves)


def distinct_prefix_tokens(trace: Trace) -> int:
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
