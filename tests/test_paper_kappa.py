"""experiments/paper-kappa.toml on a reduced workload (a quarter of the tokens, kappa scaled with
them): the fixed filter declines less as kappa grows, and the paper row reports every kappa."""

from __future__ import annotations

import pandas as pd

from replay.studies.efficientagent import load_paper_runs, paper_rows
from tests.paper_helpers import run_reduced
from tests.test_paper_claims import assert_rows_follow_the_rule

_EDITS = (
    ("tasks = 100, seed = 0 }", "tasks = 32, seed = 0, scale = 0.25 }"),
    ("device_kv_gib = 6\nhost_tier_gib = 5", "device_kv_gib = 1\nhost_tier_gib = 1.25"),
    ("kappa = [2, 4, 8, 16]", "kappa = [1, 2, 4]"),
    # token lengths are scaled by 1/4, so are the chunks: a call keeps its number of chunks
    ("chunk_tokens = 1024  #", "chunk_tokens = 256  #"),
    ("\nchunk_tokens = 1024\n", "\nchunk_tokens = 256\n"),
)  # fmt: skip


def test_fixed_filter_declines_less_as_kappa_grows_and_the_row_shows_each(tmp_path):
    root = run_reduced("paper-kappa", _EDITS, tmp_path, 3)
    d = pd.read_parquet(root / "paper-kappa" / "summary.parquet").sort_values("kappa")
    declined = (d["declined_writes"] / (d["declined_writes"] + d["chunks_written"])).to_numpy()
    assert (d["declined_writes"] > 0).all()
    assert all(a >= b for a, b in zip(declined, declined[1:], strict=False)), declined
    row = {r.key: r for r in paper_rows(load_paper_runs(root), facts=None)}["declined_5"]
    for k in (1, 2, 4):
        assert f"kappa {k}:" in row.ours
    assert_rows_follow_the_rule([row])
