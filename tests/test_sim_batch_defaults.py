"""`batch_defaults = "vllm-0.13.0"`: the simulator's step budget and seats follow the card, as
vLLM 0.13.0's API server picks them when its flags are unset (`EngineArgs.get_batch_defaults`)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import tomllib
from pathlib import Path

import click
import orjson
import pytest
from click.testing import CliRunner

from replay.cli.sim_options import sim_options
from replay.errors import ConfigError
from replay.model.presets import GIB, HARDWARE, HardwarePreset
from replay.sim.batch_defaults import VLLM_LARGE_CARD_BYTES, vllm_0_13_api_server
from replay.sim.options import SimConfig
from replay.trace.synth import synth
from tests.sim_helpers import closed_loop

ROOT = Path(__file__).resolve().parents[1]
RULE = "vllm-0.13.0"


def _card(name: str, memory_bytes: float) -> HardwarePreset:
    return dataclasses.replace(HARDWARE["h20"], name=name, memory_bytes=memory_bytes)


@pytest.mark.parametrize(
    "card, expected",
    [
        ("rtx-3090", (2048, 256)),  # 24 GB
        ("a100-40gb", (2048, 256)),
        ("a100-80gb", (2048, 256)),  # 80 GB, but vLLM excludes A100s by name
        ("explainer-4xa100", (2048, 256)),
        ("h20", (8192, 1024)),  # 96 GB
        ("h800", (8192, 1024)),  # 80 GB
        ("h100", (8192, 1024)),
        ("h200", (8192, 1024)),
        ("b200", (8192, 1024)),
    ],
)
def test_the_rule_on_every_preset(card, expected):
    assert vllm_0_13_api_server(HARDWARE[card]) == expected


def test_the_line_is_70_gib_of_total_memory_and_the_a100_name():
    assert VLLM_LARGE_CARD_BYTES == 70 * GIB
    assert vllm_0_13_api_server(_card("x", 70 * GIB)) == (8192, 1024)
    assert vllm_0_13_api_server(_card("x", 70 * GIB - 1)) == (2048, 256)
    assert vllm_0_13_api_server(_card("NVIDIA-A100-big", 200 * GIB)) == (2048, 256)


def test_no_preset_sits_where_datasheet_gb_and_nvml_gib_would_disagree():
    """Presets hold datasheet GB; vLLM reads NVML's binary total, up to 2^30/10^9 more. A preset in
    [70 GiB / 1.074, 70 GiB) could fall on the other side of vLLM's line: none may."""
    low = VLLM_LARGE_CARD_BYTES / (GIB / 1e9)
    near = [h.name for h in HARDWARE.values() if low <= h.memory_bytes < VLLM_LARGE_CARD_BYTES]
    assert near == []


def test_the_config_takes_the_rules_values_per_card():
    for card, (budget, seats) in (("rtx-3090", (2048, 256)), ("h800", (8192, 1024))):
        cfg = SimConfig(hardware=card, batch_defaults=RULE)
        assert (cfg.max_num_batched_tokens, cfg.max_num_seqs) == (budget, seats)
    plain = SimConfig(hardware="rtx-3090")  # without the rule: the values given (the defaults)
    assert (plain.max_num_batched_tokens, plain.max_num_seqs) == (8192, 256)
    # a recorded config (provenance's sim_config) builds the same config again
    cfg = SimConfig(hardware="rtx-3090", batch_defaults=RULE)
    assert SimConfig(**cfg.to_dict()) == cfg


def test_a_conflicting_value_or_an_unknown_rule_is_refused():
    with pytest.raises(ConfigError, match="--max-num-batched-tokens: 4096 conflicts .* 2048 on"):
        SimConfig(hardware="rtx-3090", batch_defaults=RULE, max_num_batched_tokens=4096)
    with pytest.raises(ConfigError, match="--max-num-seqs"):
        SimConfig(hardware="h20", batch_defaults=RULE, max_num_seqs=16)
    # an explicit value equal to the class default is still an explicit value on the CLI path
    with pytest.raises(ConfigError, match="8192 conflicts"):
        SimConfig.from_options(
            hardware="rtx-3090", batch_defaults=RULE, max_num_batched_tokens=8192
        )
    with pytest.raises(ConfigError, match="--batch-defaults: unknown rule 'vllm'; valid: vllm-0"):
        SimConfig(batch_defaults="vllm")


def test_the_cli_flag():
    seen = {}

    @click.command()
    @sim_options
    def cmd(**kw):
        seen["cfg"] = SimConfig.from_options(**kw)

    r = CliRunner().invoke(cmd, ["--hardware", "rtx-3090", "--batch-defaults", RULE])
    assert r.exit_code == 0, r.output
    assert seen["cfg"].max_num_batched_tokens == 2048
    r = CliRunner().invoke(cmd, ["--batch-defaults", "sglang"])
    assert r.exit_code == 2 and "--batch-defaults" in r.output


def test_the_simulator_runs_each_card_with_its_budget():
    """The same trace on the RTX 3090 with the rule runs exactly as with 2,048 tokens given, and
    not as with 8,192 (long prompts prefill over more steps); on the H800 as with 8,192."""
    trace = synth("swe-agent", tasks=4, seed=2, scale=0.5, max_calls_per_task=4)
    assert max(len(st.prompt) for t in trace.task_ids for st in trace.steps(t)) > 2 * 2048
    small = dict(device_kv_gib=1.0, chunk_tokens=64)

    def run(**kw):
        counters, rows, makespan = closed_loop(trace, SimConfig(**small, **kw), 4)
        return sorted((r["task"], r["call"], r["t_first"], r["t_end"]) for r in rows), makespan

    rtx_rule = run(hardware="rtx-3090", batch_defaults=RULE)
    assert rtx_rule == run(hardware="rtx-3090", max_num_batched_tokens=2048)
    assert rtx_rule != run(hardware="rtx-3090", max_num_batched_tokens=8192)
    assert run(hardware="h800", batch_defaults=RULE) == run(hardware="h800", max_num_seqs=1024)


def _sim_experiments() -> list[Path]:
    return sorted(
        p
        for p in (ROOT / "experiments").glob("paper-*.toml")
        if tomllib.loads(p.read_text())["engine"]["kind"] == "sim"
    )


@pytest.mark.parametrize("path", _sim_experiments(), ids=lambda p: p.stem)
def test_every_paper_experiment_is_served_as_the_studys_vllm(path):
    """The study's vLLM sizes the step budget per card. A paper experiment either asks for that
    rule, or runs only cards where the simulator's defaults already give vLLM's budget and its
    pool never reaches the seat limit (so the rule would change nothing)."""
    exp = tomllib.loads(path.read_text())
    engine = exp["engine"]
    if engine.get("batch_defaults") == RULE:
        return
    cards = exp.get("matrix", {}).get("hardware") or [engine.get("hardware", "h20")]
    default = SimConfig()
    for card in cards:
        budget, seats = vllm_0_13_api_server(HARDWARE[card])
        assert budget == engine.get("max_num_batched_tokens", default.max_num_batched_tokens)
        assert exp["run"]["pool"] <= min(seats, engine.get("max_num_seqs", default.max_num_seqs))


SWEEP = """\
name = "cards"
repeats = 1
[trace]
synth = { preset = "swe-agent", tasks = 4, seed = 2, scale = 0.3, max_calls_per_task = 3 }
[run]
pool = 4
[engine]
kind = "sim"
device_kv_gib = 1.0
batch_defaults = "vllm-0.13.0"
[matrix]
hardware = ["rtx-3090", "h20"]
[predict]
enabled = false
"""


def test_a_sweep_applies_each_cards_budget(tmp_path):
    from replay.sweep.config import load_experiment
    from replay.sweep.runner import run_sweep

    path = tmp_path / "cards.toml"
    path.write_text(SWEEP)
    result = run_sweep(load_experiment(path), results_root=tmp_path, echo=lambda s: None)
    assert [o.status for o in result.outcomes] == ["ok", "ok"]
    budgets = {}
    for o in result.outcomes:
        prov = orjson.loads((result.exp_dir / o.rel_dir / "run.json").read_bytes())["provenance"]
        cfg = prov["sim_config"]
        budgets[cfg["hardware"]] = (cfg["max_num_batched_tokens"], cfg["max_num_seqs"])
    assert budgets == {"rtx-3090": (2048, 256), "h20": (8192, 1024)}


def test_a_bad_rule_in_an_experiment_is_one_line_exit_2(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(SWEEP.replace('"vllm-0.13.0"', '"vllm"'))
    out = subprocess.run(
        [sys.executable, "-m", "replay.cli.main", "sweep", str(path), "--dry-run"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [
        f"replay: {path}:10: engine.batch_defaults: unknown rule 'vllm'; valid: vllm-0.13.0"
    ]
