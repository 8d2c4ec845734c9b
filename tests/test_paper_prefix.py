"""experiments/paper-prefix.toml on a reduced workload (a quarter of the tokens, the device
scaled with them): without device prefix caching every prompt token is computed and the run is
slower, and the paper row compares the two makespans under the one rule."""

from __future__ import annotations

import pandas as pd

from replay.studies.efficientagent import load_paper_runs, paper_rows
from replay.studies.efficientagent.verdict import NOT_RUN
from tests.paper_helpers import run_reduced
from tests.test_paper_claims import assert_rows_follow_the_rule

_EDITS = (
    ("tasks = 100, seed = 0 }", "tasks = 12, seed = 0, scale = 0.25 }"),
    ("device_kv_gib = 6 ", "device_kv_gib = 1.5 "),
    ("repeats = 2", "repeats = 1"),
)  # fmt: skip


def test_caching_off_computes_every_prompt_token_and_the_row_is_judged(tmp_path):
    root = run_reduced("paper-prefix", _EDITS, tmp_path, 2)
    d = pd.read_parquet(root / "paper-prefix" / "summary.parquet").set_index(
        "enable_prefix_caching"
    )
    on, off = d.loc[True], d.loc[False]
    assert off["device_hit_tokens"] == 0 and on["device_hit_tokens"] > 0
    assert off["computed_prefill_tokens"] == off["prompt_tokens"] == on["prompt_tokens"]
    assert off["makespan_s"] > on["makespan_s"]
    row = {r.key: r for r in paper_rows(load_paper_runs(root), facts=None)}["prefix_caching"]
    assert row.verdict != NOT_RUN
    speedup = off["makespan_s"] / on["makespan_s"]
    assert row.ours.startswith(f"{speedup:.2f}x"), (row.ours, speedup)
    assert_rows_follow_the_rule([row])
