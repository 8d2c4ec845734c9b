"""The sweep knows engines only through adapter hooks: no engine name appears in its code, and an
engine registered under a new name works end to end from its registry entry alone."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import orjson
import pytest

from replay.engines import sim_engines, vllm
from replay.engines.registry import ENGINES, get_engine
from replay.errors import ConfigError
from replay.sweep.config import load_experiment
from replay.sweep.dryrun import dry_run_plan
from replay.sweep.prepare import load_trace, write_predictions
from replay.sweep.runner import run_sweep

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ROOT / "replay" / "sweep"

TEXT = """\
name = "hooks"
[trace]
synth = { preset = "swe-agent", tasks = 2, seed = 1, max_calls_per_task = 3, max_prompt_tokens = 6000 }
[run]
pool = 2
[engine]
kind = "KIND"
model = "qwen3-coder-30b-a3b"
hardware = "h20"
tp = 8
device_kv_gib = 0.5
[matrix]
host_tier_gib = [0, 1]
"""


def write(tmp_path: Path, kind: str, extra: str = "") -> Path:
    p = tmp_path / f"{kind}.toml"
    p.write_text(TEXT.replace("KIND", kind).replace("tp = 8", "tp = 8\n" + extra))
    return p


def test_sweep_code_names_no_engine():
    """Engine names live in `replay/engines/`; the sweep asks the adapter instead."""
    for path in sorted(SWEEP.glob("*.py")):
        tree = ast.parse(path.read_text())
        names = {
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
        }
        assert not names & set(ENGINES), (path.name, names & set(ENGINES))


def test_a_new_engine_is_its_registry_entry(tmp_path, monkeypatch):
    monkeypatch.setitem(ENGINES, "sim-copy", dataclasses.replace(sim_engines.SIM, name="sim-copy"))
    exp = load_experiment(write(tmp_path, "sim-copy"))
    plan = dry_run_plan(exp)
    assert [e["engine"] for e in plan] == ["sim-copy", "sim-copy"]
    assert all(e["note"].startswith("in process: ") and e["argv"] is None for e in plan)
    # its typed options come from the adapter: a fraction for an integer option is refused
    with pytest.raises(ConfigError) as e:
        load_experiment(write(tmp_path, "sim-copy", "kappa = 1.5"))
    assert e.value.field == "engine.kappa"
    result = run_sweep(exp, results_root=tmp_path / "results", echo=lambda s: None)
    assert [o.status for o in result.outcomes] == ["ok", "ok"]
    doc = orjson.loads((result.exp_dir / "predictions.json").read_bytes())
    (group,) = doc["groups"]
    # prediction inputs not in the file come from the adapter's options type (SimConfig defaults)
    assert group["inputs"]["chunk_tokens"] == 256 and group["inputs"]["block_tokens"] == 16
    assert [t["host_tier_gib"] for t in group["prediction"]["tiers"]] == [0.0, 1.0]


def test_an_engines_own_prediction_replaces_the_tier_model(tmp_path, monkeypatch):
    seen: list[list] = []

    def predict(trace, resolved):
        seen.append([options["host_tier_gib"] for _, options, _ in resolved])
        return {"inputs": {"calls": len(trace)}, "prediction": {"model": "own", "tiers": []}}

    own = dataclasses.replace(sim_engines.SIM, name="sim-own", predict=predict)
    monkeypatch.setitem(ENGINES, "sim-own", own)
    exp = load_experiment(write(tmp_path, "sim-own"))
    trace = load_trace(exp)
    doc = write_predictions(trace, exp, tmp_path, force=False)
    assert doc is not None
    assert seen == [[0, 1]]  # one group: the points differ only in the host tier
    assert doc["groups"][0]["prediction"]["model"] == "own"
    assert doc["groups"][0]["inputs"] == {"calls": len(trace)}


def test_in_process_engines_refuse_what_they_would_ignore(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_experiment(write(tmp_path, "sim", 'env = { A = "1" }'))
    assert e.value.field == "engine.env" and "not an option of engine sim" in e.value.why
    # the same option on the simulator's server reaches its process environment
    exp = load_experiment(write(tmp_path, "sim-server", 'env = { A = "1" }'))
    assert dry_run_plan(exp)[0]["env"] == {"A": "1"}
    # time_scale paces the server's wall clock; in process it was recorded and ignored
    with pytest.raises(ConfigError) as e:
        load_experiment(write(tmp_path, "sim", "time_scale = 1"))
    assert e.value.field == "engine.time_scale" and "not an option of engine sim" in e.value.why
    exp = load_experiment(write(tmp_path, "sim-server", "time_scale = 1"))
    argv = dry_run_plan(exp)[0]["argv"]
    assert argv[argv.index("--time-scale") + 1] == "1"


def test_external_server_hooks(tmp_path):
    adapter = get_engine("external")
    assert adapter.server_url is not None
    assert adapter.server_url({"url": "http://h:1/v1/"}) == "http://h:1"
    assert adapter.speaking_for({"url": "u", "kind": "vllm"}) is vllm.ADAPTER
    assert adapter.speaking_for({"url": "u"}) is adapter
    p = tmp_path / "ext.toml"
    p.write_text(
        '[trace]\nsynth = { preset = "swe-agent", tasks = 2 }\n[run]\npool = 2\n'
        '[engine]\nkind = "external"\nurl = "http://127.0.0.1:9"\n'
    )
    assert (
        dry_run_plan(load_experiment(p))[0]["note"]
        == "no launch: replays against http://127.0.0.1:9"
    )
    # whose metrics an external server speaks: `kind` in its own table ([engine] kind is the engine)
    p.write_text(p.read_text() + '[engine.external]\nkind = "pigeon"\n')
    with pytest.raises(ConfigError) as e:
        load_experiment(p)
    assert e.value.field == "engine.external.kind" and "pigeon" in e.value.why


def test_simulated_llamacpp_is_predicted_by_the_model_it_runs(tmp_path):
    """The llama.cpp personality (whole prompts in slots and RAM) gets the whole-prompt model's
    prediction, with its slots and the points' RAM sizes; the block personalities keep the tier
    model. Before, every personality got the block model (errors up to +3,563%)."""
    docs = {}
    for name, extra in (("ref", ""), ("lcpp", 'personality = "llamacpp"\nmax_num_seqs = 2')):
        exp = load_experiment(write(tmp_path, "sim", extra))
        docs[name] = write_predictions(load_trace(exp), exp, tmp_path / name, force=False)
    (ref,), (lcpp,) = docs["ref"]["groups"], docs["lcpp"]["groups"]
    assert ref["prediction"]["model"] == "lru-stack-depth"
    pred = lcpp["prediction"]
    assert pred["model"] == "llamacpp-wholeprompt" and pred["slots"] == 2
    assert [t["cache_ram_mib"] for t in pred["tiers"]] == [0, 1024]  # host_tier_gib 0 and 1
    # the state it stores: the preset's KV bytes a token plus llama.cpp's 12 bytes of cell data
    from replay.model.presets import get_model

    kv = get_model("qwen3-coder-30b-a3b").bytes_per_token(8)
    assert pred["bytes_per_token"] == kv + 12


def test_a_twin_sweeping_cache_ram_mib_runs_the_same_tier_under_the_measured_names(tmp_path):
    """A llama.cpp sweep whose matrix names `cache_ram_mib` has a twin with that same matrix:
    its points carry the measured sweep's names (which `replay report --vs` pairs by), its
    predictions the same RAM sizes, and its runs the same tier as host_tier_gib = MiB / 1024.
    Before, the simulator refused the key and a twin's points could never pair."""
    twin = (ROOT / "experiments" / "llamacpp-cpu-sim.toml").read_text()
    twin = twin.replace('costs = "costs/', f'costs = "{ROOT / "experiments" / "costs"}/')
    matrix = "host_tier_gib = [0, 0.00390625, 0.0078125, 0.015625]"
    counters = {}
    for key, values in (("cache_ram_mib", "[0, 4]"), ("host_tier_gib", "[0, 0.00390625]")):
        p = tmp_path / f"{key}.toml"
        named = twin.replace('"llamacpp-cpu-sim"', f'"{key}"')
        p.write_text(named.replace(matrix, f"{key} = {values}"))
        exp = load_experiment(p)
        result = run_sweep(exp, results_root=tmp_path / "results", echo=lambda s: None)
        assert [o.status for o in result.outcomes] == ["ok", "ok"]
        for o in result.outcomes:
            doc = orjson.loads((result.exp_dir / o.rel_dir / "counters.json").read_bytes())
            counters[o.rel_dir.split("/")[0]] = doc
        groups = orjson.loads((result.exp_dir / "predictions.json").read_bytes())["groups"]
        tiers = [t["cache_ram_mib"] for g in groups for t in g["prediction"]["tiers"]]
        assert sorted(tiers) == [0, 4]
    assert counters["cache_ram_mib=4"] == counters["host_tier_gib=0.00390625"]
    assert counters["cache_ram_mib=0"] == counters["host_tier_gib=0"]
    assert counters["cache_ram_mib=4"]["host_restore_tokens"] > 0  # the tier was there


def test_the_prediction_takes_the_simulators_efficiency_and_reserved_block(tmp_path):
    """The service model took 0.6 whatever `efficiency` the simulator ran with, and the vllm
    personality's device (one block short: vLLM's null block) was predicted a block larger."""
    from replay.sweep.prepare import prediction_inputs

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    plain = load_experiment(write(tmp_path / "a", "sim"))
    tuned = load_experiment(write(tmp_path / "b", "sim", 'personality = "vllm"\nefficiency = 0.3'))
    a = prediction_inputs(plain, plain.points()[0])
    b = prediction_inputs(tuned, tuned.points()[0])
    assert (a["efficiency"], a["reserved_blocks"]) == (0.6, 0)
    assert (b["efficiency"], b["reserved_blocks"]) == (0.3, 1)
    trace = load_trace(plain)
    rows = [
        write_predictions(trace, exp, tmp_path / name / "out", force=False)["groups"][0]
        for name, exp in (("a", plain), ("b", tuned))
    ]
    device = [row["prediction"]["device_tokens"] for row in rows]
    from replay.sim.options import SimConfig

    _, options, _ = tuned.resolve(tuned.points()[0])
    cfg = SimConfig.from_options(**options)
    assert device[1] == cfg.device_blocks * cfg.block_tokens  # what the simulator holds
    assert device[1] == (device[0] // 16 - 1) * 16  # one 16-token block less
