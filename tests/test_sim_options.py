"""Presets and SimConfig: published numbers, validation, the SIMOPTS click surface."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from replay.cli.sim_options import sim_options
from replay.errors import ConfigError
from replay.model.presets import HARDWARE, MODELS, get_hardware, get_model
from replay.sim.options import SimConfig


def test_kv_bytes_per_token_match_the_model_cards():
    assert MODELS["qwen3-coder-30b-a3b"].bytes_per_token(8) == 24_576  # 4 KV heads: 1 per rank
    assert MODELS["qwen3-coder-30b-a3b"].bytes_per_token(1) == 4 * 24_576
    assert MODELS["llama-3-70b"].bytes_per_token(1) == 320 * 1024
    assert MODELS["llama-3-70b"].bytes_per_token(4) == 80 * 1024
    assert MODELS["llama-3-8b"].bytes_per_token(1) == 128 * 1024


def test_compute_per_host_byte_matches_the_study():
    assert HARDWARE["rtx-3090"].compute_per_host_byte == pytest.approx(2.2e3, rel=0.03)
    assert HARDWARE["h20"].compute_per_host_byte == pytest.approx(2.3e3, rel=0.03)
    assert HARDWARE["h800"].compute_per_host_byte == pytest.approx(15.5e3, rel=0.01)
    assert all(h.source for h in HARDWARE.values()) and all(m.source for m in MODELS.values())


def test_unknown_preset_names_list_the_valid_ones():
    with pytest.raises(ConfigError, match="valid: .*a100-40gb.*rtx-3090"):
        get_hardware("tpu")
    with pytest.raises(ConfigError, match="llama-3-70b"):
        get_model("gpt-5")
    with pytest.raises(ConfigError, match="--model"):
        SimConfig(model="nope")


@pytest.mark.parametrize(
    "kw, flag",
    [
        ({"tp": 0}, "--tp"),
        ({"chunk_tokens": 100}, "--chunk-tokens"),
        ({"admission": "maybe"}, "--admission"),
        ({"efficiency": 1.5}, "--efficiency"),
        ({"device_kv_gib": 1e-9}, "--device-kv-gib"),
        ({"host_tier_gib": -1}, "--host-tier-gib"),
        # less than one 6 MiB chunk: it was no tier, without a word
        ({"host_tier_gib": 0.005}, "--host-tier-gib"),
        ({"host_tier_gib": 1, "chunk_tokens": 1_000_000}, "--host-tier-gib"),
        # the llamacpp personality's RAM tier holds whole prompts: these were ignored
        ({"personality": "llamacpp", "admission": "fixed"}, "--admission"),
        ({"personality": "llamacpp", "write_policy": "write-back"}, "--write-policy"),
    ],
)
def test_invalid_config_names_the_flag(kw, flag):
    with pytest.raises(ConfigError, match=flag):
        SimConfig(**kw)


def test_capacities_follow_bytes_per_token():
    c = SimConfig(model="llama-3-70b", tp=1, device_kv_gib=1, host_tier_gib=2, chunk_tokens=256)
    assert c.device_blocks == (1 << 30) // (16 * 327_680)
    assert c.host_chunks == (2 << 30) // (256 * 327_680)


def test_click_options_build_the_config_and_ignore_other_arguments():
    seen = {}

    @click.command()
    @click.option("--trace")
    @sim_options
    def cmd(trace, **kw):
        seen["cfg"] = SimConfig.from_options(trace=trace, **kw)

    r = CliRunner().invoke(
        cmd,
        [
            "--trace",
            "x",
            "--hardware",
            "h100",
            "--tp",
            "2",
            "--host-tier-gib",
            "5",
            "--admission",
            "conditioned",
            "--kappa",
            "3",
            "--no-attention-flops",
            "--device-eviction",
            "session",
        ],
    )
    assert r.exit_code == 0, r.output
    cfg = seen["cfg"]
    assert (cfg.hardware, cfg.tp, cfg.host_tier_gib, cfg.admission, cfg.kappa) == (
        "h100",
        2,
        5.0,
        "conditioned",
        3,
    )
    assert cfg.attention_flops is False and cfg.device_eviction == "session"
    assert cfg.model == SimConfig().model  # unset options keep the defaults
