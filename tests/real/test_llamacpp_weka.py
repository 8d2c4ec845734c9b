"""A real WEKA Claude Code trace, scaled 1/64 (`replay trace scale`, docs/trace.md), through a
`--cache-ram` sweep of llama.cpp's server (experiments/weka-llamacpp-cpu.toml, run as it is), checked
against the whole-prompt model the same way as test_llamacpp_sweep.py:

- every run is ok, with prompt and completion lengths checked per call (`strict = true`);
- the model replayed on each run's observed send/end times gives the run's computed prefill within
  8% of the prompt tokens (a send and its admission by the server differ by milliseconds);
- computed prefill falls from the tier off to near the trace's unavoidable prefill (each task's
  last prompt) once the tier holds the working set of the three side-by-side sub-agents;
- each point at or above the working set the sweep's pre-registered prediction gives (11-14
  MiB) lies within 5% of the prompt tokens of the band it predicts for server speeds from 0.25x
  to 2x (one repeat per point; the 16 MiB point measured 6,042-6,702 tokens in six runs, against
  a band of 5,461-5,855: the run-to-run noise of the server's slot choice is that wide).

Not asserted: the a-priori prediction below the working set. At 4 MiB the server computed 6,106
to 9,036 tokens depending on the machine's load, against a predicted 5,766-6,160. With the tier
off the model's closed loop said
8,654 computed prefill tokens and the server computed 17,739 (measured on a loaded 2-core
machine), while the same model replayed on the run's observed call times agreed within 8%. So
the cache model holds and the a-priori schedule does not: the closed loop runs side-by-side calls
at full speed, and on the server's one thread the three parallel sub-agents overlap for longer,
so they take each other's slots more often. Once the tier holds the working set a lost slot
costs little, whatever the timing, and the prediction holds.

Known flake, not of this test: a call whose request was written whole sometimes gets no answer
(`connection lost: server closed the connection without answering`): 1 call in about 160 on a
machine at load 14, and 3-9 of 53 per run with no think time at all (`gap_scale = 0`), which is
why the experiment keeps a thousandth of the recorded think times. With 1/50 of them the
tier-off point depends on the machine's speed (9,763 instead of ~17,000 tokens on an idle one).

Marker `llamacpp`: deselected by `make test`, run by `make test-llamacpp`.
"""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from replay.model.wholeprompt import WholePromptConfig, simulate_timed
from replay.sweep.config import load_experiment
from replay.sweep.prepare import load_trace
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

EXPERIMENT = REPO / "experiments" / "weka-llamacpp-cpu.toml"


def test_weka_trace_cache_ram_sweep_matches_the_whole_prompt_model(tmp_path):
    require_xllamacpp()
    env = env_with_cache(tmp_path / "cache")
    results = tmp_path / "results"
    sweep = subprocess.run(
        [sys.executable, "-m", "replay.cli.main", "sweep", str(EXPERIMENT), "--results", str(results)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert sweep.returncode == 0, sweep.stdout[-2000:] + sweep.stderr[-3000:]

    exp = load_experiment(EXPERIMENT)
    trace = load_trace(exp)
    assert trace.header.meta["scaled"]["tokens_divisor"] == 64
    assert sum(1 for cs in trace.tasks.values() if cs[0].parent is not None) == 4
    exp_dir = results / exp.name
    summary = pd.read_parquet(exp_dir / "summary.parquet")
    assert (summary["status"] == "ok").all(), summary[["point", "repeat", "status", "reason"]]
    assert (summary["prompt_mismatches"] == 0).all()
    assert (summary["completion_mismatches"] == 0).all()
    assert (summary["prompt_tokens"] == trace.prompt_tokens).all()
    summary["mib"] = (summary["host_tier_gib"] * 1024).round().astype(int)

    for row in summary.itertuples(index=False):
        run_dir = exp_dir / row.point / f"r{row.repeat}"
        cfg = WholePromptConfig(2, int(row.mib), BYTES_PER_TOKEN, OVERHEAD_BYTES, ctx_tokens=16384)
        model = simulate_timed(trace, observed_events(read_calls(run_dir)), cfg).totals
        assert abs(model.computed_prefill_tokens - row.computed_prefill_tokens) <= (
            0.08 * trace.prompt_tokens
        ), (row.point, model.computed_prefill_tokens, row.computed_prefill_tokens)

    means = summary.groupby("mib")["computed_prefill_tokens"].mean().sort_index()
    mibs = [int(m) for m in means.index]
    off, top = float(means.iloc[0]), float(means.iloc[-1])
    unavoidable = sum(calls[-1].prompt_len for calls in trace.tasks.values())
    assert mibs[0] == 0
    assert unavoidable <= top <= 1.3 * unavoidable, (top, unavoidable)
    assert off >= 1.5 * top, (off, top)

    pred = read_json(exp_dir / "predictions.json")["groups"][0]["prediction"]
    assert pred["model"] == "llamacpp-wholeprompt"
    grid = pred["band_grid_mib"]
    curves = [[curve[grid.index(m)] for m in mibs] for curve in pred["band_curves"]]
    slack = 0.05 * trace.prompt_tokens
    for k, m in enumerate(mibs):
        if m < min(pred["band"]["saturation_mib"]):
            continue  # below the working set the outcome depends on timing (module docstring)
        band = (min(c[k] for c in curves) - slack, max(c[k] for c in curves) + slack)
        assert band[0] <= means.loc[m] <= band[1], (m, means.loc[m], band)
    print(
        f"\nWEKA llamacpp sweep: computed prefill by --cache-ram MiB {dict(means.round(0))}; "
        f"unavoidable {unavoidable}; prompt tokens {trace.prompt_tokens}"
    )
