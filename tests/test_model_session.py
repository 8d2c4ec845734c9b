"""The explainer's whole-session model: five sessions hit, a sixth falls off the cliff."""

import pytest

from replay.errors import ConfigError
from replay.model.presets import GIB, HARDWARE, MODELS
from replay.model.session import (
    TurnPrices,
    session_curve,
    session_hit_rates,
    sessions_that_fit,
    turn_prices,
)

LLAMA, HW = MODELS["llama-3-70b"], HARDWARE["explainer-4xa100"]
BPT = LLAMA.bytes_per_token(1)  # 320 KiB
DEVICE = 167.6 * GIB  # 180 GB


def test_explainer_prices():
    p = turn_prices(LLAMA, HW, 88_000)
    assert BPT == 320 * 1024
    assert p.host_copy_s == pytest.approx(2.5, abs=0.15)
    assert p.recompute_s == pytest.approx(10.0, abs=0.3)
    assert p.device_hit_s == 0


def test_five_sessions_fit_at_the_end_of_the_conversation_and_six_do_not():
    # histories grown from 88K to ~100K tokens: 180 GB holds five of them
    assert sessions_that_fit(DEVICE, 100_000, BPT) == 5
    assert sessions_that_fit(DEVICE, 88_000, BPT) == 6  # at the start, six would still fit


def test_round_robin_cliff_and_random_slope():
    prices = TurnPrices(0.0, 2.5, 10.0)
    five = session_hit_rates(5, 5, 0, prices)
    six = session_hit_rates(6, 5, 0, prices)
    assert (five.device_hit_rate, five.mean_turn_s) == (1.0, 0.0)
    assert (six.device_hit_rate, six.miss_rate, six.mean_turn_s) == (0.0, 1.0, 10.0)
    rnd = session_hit_rates(6, 5, 0, prices, access="random")
    assert rnd.device_hit_rate == pytest.approx(5 / 6)
    assert rnd.mean_turn_s == pytest.approx(10 / 6)


def test_host_tier_turns_the_cliff_into_host_copies():
    prices = TurnPrices(0.0, 2.5, 10.0)
    r = session_hit_rates(8, 5, 10, prices)
    assert (r.device_hit_rate, r.host_hit_rate, r.miss_rate) == (0.0, 1.0, 0.0)
    assert r.mean_turn_s == 2.5
    beyond = session_hit_rates(11, 5, 10, prices)
    assert beyond.miss_rate == 1.0


def test_curve_rates_sum_to_one():
    out = session_curve(
        12,
        session_tokens=100_000,
        bytes_per_token=BPT,
        device_bytes=DEVICE,
        host_bytes=300 * GIB,
        prices=turn_prices(LLAMA, HW, 100_000),
        access="random",
    )
    assert out["device_sessions"] == 5 and len(out["curve"]) == 12
    for row in out["curve"]:
        assert row["device_hit_rate"] + row["host_hit_rate"] + row["miss_rate"] == pytest.approx(1)


def test_bad_access_is_a_config_error():
    with pytest.raises(ConfigError, match="round-robin"):
        session_hit_rates(3, 1, 1, TurnPrices(0, 1, 2), access="fifo")
