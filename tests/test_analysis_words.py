"""Numbers and verdicts in words, as the report prints them."""

from __future__ import annotations

from replay.analysis.compare import welch_compare
from replay.analysis.words import comparison_sentence, fmt_interval, fmt_num


def test_number_formats():
    assert fmt_num(5_281_000) == "5.281M"
    assert fmt_num(65_200) == "65.2K"
    assert fmt_num(0.25) == "0.25"
    assert fmt_num(None) == "-"
    assert fmt_num(float("inf")) == "∞"


def test_intervals_share_the_mean_unit_and_flag_single_repeats():
    assert fmt_interval(1_500_000, 25_000, 3, 1_480_000, 1_520_000) == "1.5M ± 0.025M [1.48M–1.52M]"
    assert fmt_interval(12.0, float("nan"), 1) == "12 (n=1)"
    assert fmt_interval(12.0, float("nan"), 1, show_n=False) == "12"  # a table with an n column
    assert fmt_interval(0.2, 1e-17, 3) == "0.2 ± 0"
    # a half-width of 100 or more in the mean's unit was written 1.3e+02K
    assert fmt_interval(290_453, 134_478, 3) == "290.5K ± 130K"
    assert fmt_interval(125.5, 1234, 3) == "125.5 ± 1,200"
    assert fmt_interval(1000, 99.6, 2) == "1K ± 0.10K"
    assert fmt_interval(101.273, 8.42, 3) == "101.3 ± 8.4"


def _row(
    a, b, factor="admission", base="all", level="conditioned", metric="computed_prefill_tokens"
):
    c = welch_compare(a, b)
    return {"factor": factor, "baseline": base, "level": level, "metric": metric, **c.__dict__}


def test_real_difference_sentence():
    s = comparison_sentence(_row([100.0, 101.0, 99.0], [65.0, 66.0, 64.0]), {"host_tier_gib": 5})
    assert s.startswith("admission=conditioned lowers computed prefill by 35.0% ± ")
    assert "vs admission=all at host_tier_gib=5 (real; Welch p=" in s


def test_noise_and_single_repeat_sentences():
    noise = comparison_sentence(
        _row([60.0, 62.0, 58.0], [61.0, 59.0, 60.5], metric="makespan_s"), {"host_tier_gib": 10}
    )
    assert (
        "the makespan difference" in noise
        and "is within noise" in noise
        and "at host_tier_gib=10" in noise
    )
    single = comparison_sentence(_row([100.0], [50.0]), {})
    assert "single repeat" in single and "(real" not in single
    same = comparison_sentence(_row([125.0], [125.0], metric="makespan_s"), {})
    assert same.startswith("admission=conditioned and admission=all give the same makespan")
    assert "raises" not in same and "single repeat" in same


def test_far_apart_means_with_spread_are_not_called_identical_repeats():
    # Welch's p underflows to 0 here, yet each side's repeats differ: the sentence used to say
    # "identical repeats, no measured noise" from p == 0
    a = [100.0 + 0.001 * i for i in range(50)]
    b = [200.0 + 0.001 * i for i in range(50)]
    row = _row(a, b, metric="makespan_s")
    assert row["p_value"] == 0.0
    s = comparison_sentence(row, {})
    assert "identical repeats" not in s and "(real; Welch p=0" in s
    exact = comparison_sentence(_row([100.0] * 3, [200.0] * 3, metric="makespan_s"), {})
    assert "identical repeats, no measured noise" in exact
