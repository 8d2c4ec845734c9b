"""Closed form and offload economics against the published numbers (EfficientAgent study)."""

import math

import pytest

from replay.errors import ConfigError
from replay.model.closed_form import closed_form, pressure_ratio, working_set_bytes
from replay.model.economics import economics_table, offload_benefit_ratio, prefill_flops
from replay.model.presets import GIB, HARDWARE, MODELS

KIB = 1024


def test_sixteen_agents_at_33k_tokens_and_24_kib():
    cf = closed_form(16, 33_000, 24 * KIB, [5, 10, 20])
    assert 11.3 <= cf.working_set_gib <= 11.4
    assert [round(p, 2) for p in cf.pressure_ratio] == pytest.approx([2.27, 1.13, 0.57], abs=0.01)
    # the study's rounding: about 2.3 / 1.1 / 0.57
    assert [round(p, 1) for p in cf.pressure_ratio[:2]] == [2.3, 1.1]


def test_sixty_four_agents_at_64k_tokens():
    ws = working_set_bytes(64, 64 * KIB, 24 * KIB)
    assert ws / GIB == pytest.approx(94.5, abs=0.05)


def test_bytes_per_token_of_the_study_model_is_24_kib_at_tp8():
    assert MODELS["qwen3-coder-30b-a3b"].bytes_per_token(8) == 24 * KIB


def test_pool_of_one_has_no_working_set_and_empty_tier_has_infinite_pressure():
    assert working_set_bytes(1, 50_000, 24 * KIB) == 0
    assert math.isinf(pressure_ratio(1.0, 0))
    assert closed_form(4, 1000, 10, [0]).to_dict()["pressure_ratio"] == [None]


@pytest.mark.parametrize(
    "bad", [dict(pool=0), dict(bytes_per_token=0), dict(mean_prompt_tokens=-1)]
)
def test_bad_inputs_raise_config_errors(bad):
    kw = dict(pool=4, mean_prompt_tokens=1000, bytes_per_token=10) | bad
    with pytest.raises(ConfigError):
        working_set_bytes(**kw)


def test_compute_per_host_byte_matches_the_issue():
    # about 2.2K for RTX 3090, 2.3K for H20, 15.5K for H800
    table = {e.hardware: e for e in economics_table(MODELS["llama-3-8b"], [1024])}
    assert table["rtx-3090"].compute_per_host_byte == pytest.approx(2.2e3, rel=0.03)
    assert table["h20"].compute_per_host_byte == pytest.approx(2.3e3, rel=0.03)
    assert table["h800"].compute_per_host_byte == pytest.approx(15.5e3, rel=0.01)
    assert len(table) == len(HARDWARE)


def test_explainer_restore_beats_recompute_by_about_four():
    # 88K tokens of Llama-3-70B: restore ~2.5 s over 12 GB/s, recompute ~10 s (linear FLOPs at peak)
    m, hw = MODELS["llama-3-70b"], HARDWARE["explainer-4xa100"]
    b = offload_benefit_ratio(m, hw, 88_000, attention=False)
    assert b == pytest.approx(1 - 2.5 / 10, abs=0.02)


def test_benefit_grows_with_prefix_length_when_attention_counts():
    m, hw = MODELS["qwen3-coder-30b-a3b"], HARDWARE["h20"]
    ratios = [offload_benefit_ratio(m, hw, n, tp=8) for n in (1_000, 10_000, 100_000)]
    assert ratios == sorted(ratios)
    assert all(0 < r < 1 for r in ratios)


def test_attention_flops_are_causal_pairs():
    m = MODELS["llama-3-8b"]
    # one token attends to itself only; two tokens make three (query, key) pairs
    att = m.attention_flops_per_context_token()
    assert prefill_flops(m, 2) - prefill_flops(m, 2, attention=False) == pytest.approx(3 * att)
