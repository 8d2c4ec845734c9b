"""The `--cache-ram` sweep of experiments/llamacpp-cpu.toml through `replay sweep` and `replay report`,
checked against the whole-prompt model's pre-registered prediction.

What is asserted, and why these tolerances:
- every run is ok, with prompt and completion lengths checked per call (`strict = true`), and
  the model replayed on each run's observed send/end times gives its computed prefill within 8% of
  the prompt tokens (the set-up and these checks are shared with test_llamacpp_weka.py, in
  tests/real/llamacpp_sweeps.py, which says why 8%);
- computed prefill falls to near the trace's unavoidable prefill (the distinct tokens of the
  tasks' last prompts, a head they share counted once: everything else can be reused) once the
  tier holds the working set: within 20% above it, the room the server's own
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

import pytest

from replay.model.wholeprompt_loop import halfway_mib
from tests.real.conftest_llamacpp import REPO
from tests.real.llamacpp_sweeps import distinct_prefix_tokens, run_cache_ram_sweep

pytestmark = pytest.mark.llamacpp

EXPERIMENT = REPO / "experiments" / "llamacpp-cpu.toml"


def test_cache_ram_sweep_matches_the_whole_prompt_model(tmp_path):
    sweep = run_cache_ram_sweep(EXPERIMENT, tmp_path)  # runs ok, each explained by the model
    trace, means, mibs, curves = sweep.trace, sweep.means, sweep.mibs, sweep.curves
    off, top = float(means.iloc[0]), float(means.iloc[-1])
    unavoidable = distinct_prefix_tokens(trace)
    assert mibs[0] == 0
    assert unavoidable <= top <= 1.2 * unavoidable, (top, unavoidable)
    assert off >= 2 * top, (off, top)

    predicted = [h for h in (halfway_mib(mibs, c) for c in curves) if h is not None]
    measured = halfway_mib(mibs, list(means.values))
    step = min(b - a for a, b in zip(mibs, mibs[1:], strict=False))
    assert measured is not None and predicted
    lo, hi = min(predicted) - step / 4, max(predicted) + step / 4
    assert lo <= measured <= hi, (measured, predicted)
    swing = 0.1 * (max(c[0] for c in curves) - min(c[-1] for c in curves))
    for k, m in enumerate(mibs):
        band = sweep.predicted_range(k)
        assert band[0] - swing <= means.loc[m] <= band[1] + swing, (m, means.loc[m], band)
    print(
        f"\nllamacpp sweep: computed prefill by --cache-ram MiB {dict(means.round(0))}; "
        f"unavoidable {unavoidable}; halfway measured {measured:.2f} MiB, "
        f"predicted {[round(h, 2) for h in predicted]} "
        f"(speeds {sweep.prediction['band']['speed']})"
    )
