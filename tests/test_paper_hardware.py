"""experiments/paper-hardware.toml on a reduced workload (half the tokens, 24 tasks, a tenth of
the tool gaps so that compute still matters, tiers and device scaled), through the real sweep and
the paper rows: the study's hardware result must hold where the simulator can show it."""

from __future__ import annotations

import pytest

from replay.studies.efficientagent import NO, YES, PaperRun, load_paper_runs, paper_rows
from tests.paper_helpers import run_reduced

_EDITS = (
    ("tasks = 100, seed = 0 }", "tasks = 24, seed = 0, scale = 0.5 }"),
    ("pool = 16", "pool = 16\ngap_scale = 0.1"),
    ("device_kv_gib = 4\nadmission", "device_kv_gib = 2\nadmission"),
    ("host_tier_gib = [0, 20, 40]", "host_tier_gib = [0, 20]"),
    ("transfer_overhead_s = [0.0, 0.001, 0.002, 0.005]", "transfer_overhead_s = [0.0, 0.001]"),
    # the per-chunk cost is tested at 256-token chunks, where 1 ms per chunk already matters
    ("chunk_tokens = 1024  #", "chunk_tokens = 256  #"),
)  # fmt: skip


@pytest.fixture(scope="module")
def hw(tmp_path_factory) -> PaperRun:
    root = run_reduced("paper-hardware", _EDITS, tmp_path_factory.mktemp("hardware"), 12)
    return load_paper_runs(root)["paper-hardware"]


def _gain(hw: PaperRun, card: str, overhead_s: float) -> float:
    base = hw.values("makespan_s", hardware=card, host_tier_gib=0, transfer_overhead_s=overhead_s)
    tier = hw.values("makespan_s", hardware=card, host_tier_gib=20, transfer_overhead_s=overhead_s)
    assert len(base) == len(tier) == 1
    return float(tier[0] / base[0] - 1)


def test_bytes_only_copies_pay_least_where_compute_per_link_byte_is_highest(hw):
    gains = {c: _gain(hw, c, 0.0) for c in ("rtx-3090", "h20", "h800")}
    assert all(g < 0 for g in gains.values()), gains
    assert gains["h800"] > 0.5 * max(gains["rtx-3090"], gains["h20"]), gains


def test_a_per_chunk_copy_cost_turns_offload_into_a_loss_on_the_h800_only(hw):
    gains = {c: _gain(hw, c, 0.001) for c in ("rtx-3090", "h20", "h800")}
    assert gains["h800"] > 0 > max(gains["rtx-3090"], gains["h20"]), gains
    rows = {r.key: r for r in paper_rows({"paper-hardware": hw}, facts=None)}
    assert rows["offload_split"].verdict == YES  # a finding: it holds at 1 ms per chunk
    assert rows["offload_h800"].verdict == NO  # bytes only: still a gain, reported as such
