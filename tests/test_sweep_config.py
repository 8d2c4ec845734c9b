"""Experiment files: validation names the field; matrix -> points; seeded interleaved order."""

from __future__ import annotations

from pathlib import Path

import pytest

from replay.errors import ConfigError
from replay.sweep.config import load_experiment
from replay.sweep.plan import plan_runs

BASE = """
name = "t"
repeats = 3
seed = 5
[trace]
synth = { preset = "swe-agent", tasks = 2, seed = 1 }
[run]
pool = 2
[engine]
kind = "sim"
device_kv_gib = 1.0
[matrix]
host_tier_gib = [0, 2, 8]
admission = ["all", "fixed"]
"""


def write(tmp_path, text: str, name: str = "t.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_points_are_the_product_in_file_order(tmp_path):
    exp = load_experiment(write(tmp_path, BASE))
    names = [p.name for p in exp.points()]
    assert names[:3] == [
        "host_tier_gib=0,admission=all",
        "host_tier_gib=0,admission=fixed",
        "host_tier_gib=2,admission=all",
    ]
    assert len(names) == 6
    engine, options, run = exp.resolve(exp.points()[3])
    assert engine == "sim" and options["host_tier_gib"] == 2 and options["admission"] == "fixed"
    assert options["device_kv_gib"] == 1.0 and run == {"pool": 2}


def test_order_is_interleaved_seeded_and_complete(tmp_path):
    exp = load_experiment(write(tmp_path, BASE))
    runs = plan_runs(exp)
    assert len(runs) == 6 * 3
    # every round holds each point once, so repeats of a point are spread over the sweep
    for r in range(3):
        chunk = runs[6 * r : 6 * (r + 1)]
        assert {x.repeat for x in chunk} == {r}
        assert sorted(x.point.name for x in chunk) == sorted(p.name for p in exp.points())
    assert [x.rel_dir for x in plan_runs(exp)] == [x.rel_dir for x in runs]  # same seed, same order
    sequential = plan_runs(exp, "sequential")
    assert [x.point.name for x in sequential[:6]] == [p.name for p in exp.points()]
    assert [x.rel_dir for x in runs] != [x.rel_dir for x in sequential]
    other = load_experiment(write(tmp_path, BASE.replace("seed = 5", "seed = 6"), "u.toml"))
    assert [x.rel_dir for x in plan_runs(other)] != [x.rel_dir for x in runs]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (("repeats = 3", "repeats = 0"), "repeats"),
        (("repeats = 3", "repeats = 3\nbogus = 1"), "bogus"),
        (('kind = "sim"', 'kind = "tgi"'), "engine.kind"),
        (("host_tier_gib = [0, 2, 8]", "host_tier_gib = []"), "matrix.host_tier_gib"),
        (("host_tier_gib = [0, 2, 8]", "host_tier_gib = [0, -2]"), "matrix.host_tier_gib"),
        (('admission = ["all", "fixed"]', 'admission = ["all", "lottery"]'), "matrix.admission"),
        (("device_kv_gib = 1.0", "device_kv_gib = 1.0\nwarp = 9"), "engine.warp"),
        (("pool = 2", "pool = 0"), "run.pool"),
        (("pool = 2", "pool = 2\nspeed = 3"), "run.speed"),
        (('synth = { preset = "swe-agent", tasks = 2, seed = 1 }', ""), "trace"),
    ],
)
def test_errors_name_the_field(tmp_path, change, field):
    p = write(tmp_path, BASE.replace(*change))
    with pytest.raises(ConfigError) as e:
        load_experiment(p)
    assert e.value.field == field
    assert str(p) in str(e.value)


def test_swept_seeds_closer_than_the_repeats_are_refused(tmp_path):
    """With 3 repeats, seeds 0 and 2 ran seed=0/r2 and seed=2/r0 with one engine seed: one run
    counted twice as independent. Seeds 3 apart, or one seed per other setting, are fine."""
    close = BASE.replace('admission = ["all", "fixed"]', "seed = [0, 2]")
    with pytest.raises(ConfigError, match=r"0 and 2 are closer than repeats = 3: .*seed=0/r2"):
        load_experiment(write(tmp_path, close))
    apart = BASE.replace('admission = ["all", "fixed"]', "seed = [0, 3]")
    assert len(load_experiment(write(tmp_path, apart, "a.toml")).points()) == 6
    one_each = BASE.replace("repeats = 3", "repeats = 1").replace(
        'admission = ["all", "fixed"]', "seed = [0, 1]"
    )
    assert len(load_experiment(write(tmp_path, one_each, "b.toml")).points()) == 6


def test_a_point_name_too_long_for_a_folder_is_refused_at_load(tmp_path):
    """It passed load and --dry-run, and failed after the first point with 'File name too
    long'."""
    costs = tmp_path / ("d" * 200) / "costs.toml"  # a calibrated costs file deep in a tree
    costs.parent.mkdir()
    costs.write_bytes(
        (Path(__file__).parents[1] / "experiments/costs/llamacpp-cpu.toml").read_bytes()
    )
    long = BASE.replace('admission = ["all", "fixed"]', f'costs = ["{costs}"]')
    with pytest.raises(ConfigError, match=r"matrix: point name .* past a folder name's 255"):
        load_experiment(write(tmp_path, long))


def test_engine_specific_tables_apply_per_engine(tmp_path):
    text = """
[trace]
path = "x.jsonl"
[run]
pool = 4
[engine]
kind = "vllm"
model = "m"
[engine.vllm]
device_kv_gib = 4
[engine.sglang]
device_kv_tokens = 1000
[matrix]
engine = ["vllm", "sglang"]
"""
    (tmp_path / "x.jsonl").write_text("")  # found beside the experiment file; read by the sweep
    exp = load_experiment(write(tmp_path, text))
    (p_vllm, p_sglang) = exp.points()
    assert exp.resolve(p_vllm)[1] == {"model": "m", "device_kv_gib": 4}
    assert exp.resolve(p_sglang)[1] == {"model": "m", "device_kv_tokens": 1000}
    bad = text.replace("device_kv_tokens = 1000", "device_kv_gib = 4")
    with pytest.raises(ConfigError, match="not an option of engine sglang"):
        load_experiment(write(tmp_path, bad, "bad.toml"))


def test_unreadable_and_invalid_toml(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_experiment(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_experiment(write(tmp_path, "name = \n"))


def test_cli_reports_bad_files_in_one_line(tmp_path):
    import subprocess
    import sys

    p = write(tmp_path, BASE.replace("pool = 2", "pool = -1"))
    out = subprocess.run(
        [sys.executable, "-m", "replay.cli.main", "sweep", str(p), "--dry-run"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.startswith("replay: ") and "run.pool" in out.stderr
    assert "Traceback" not in out.stderr


def test_config_still_exports_the_experiment_types():
    """The types moved to replay.sweep.experiment; callers keep importing them from config."""
    from replay.sweep import config, experiment

    moved = set(experiment.__all__) - {"value_name"}
    assert moved <= set(config.__all__)
    for name in moved:
        assert getattr(config, name) is getattr(experiment, name), name
    assert all(hasattr(config, name) for name in config.__all__)


def _docs_example() -> str:
    """The experiment file docs/sweeps.md shows under "Experiment files"."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "sweeps.md").read_text()
    return doc.split("## Experiment files", 1)[1].split("```toml", 1)[1].split("```", 1)[0]


@pytest.mark.parametrize("engines", [None, '["vllm", "sglang"]'])
def test_the_docs_example_loads_as_shown_and_with_its_engine_axis(engines, tmp_path, monkeypatch):
    # its paths are the repository's (a bundled trace); a copied example must load as it is
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    text = _docs_example()
    if engines is not None:
        hint = '# engine = ["vllm", "sglang"]'
        assert hint in text
        text = text.replace(hint, f"engine = {engines}\n#")
    exp = load_experiment(write(tmp_path, text))  # refuses an option the swept engine lacks
    resolved = [exp.resolve(p) for p in exp.points()]
    assert {kind for kind, _, _ in resolved} == (
        {"vllm"} if engines is None else {"vllm", "sglang"}
    )
    assert Path(exp.trace.path).is_file()


def test_a_missing_scaled_weka_trace_says_how_it_is_made(tmp_path, monkeypatch):
    """The real-engine experiments' WEKA traces are built from ../shared, not committed: a fresh
    clone's doctor said only "no such trace file"."""
    monkeypatch.chdir(tmp_path)
    src = Path(__file__).resolve().parents[1] / "experiments" / "weka-vllm-cpu.toml"
    with pytest.raises(ConfigError) as e:
        load_experiment(src)
    assert e.value.field == "trace.path"
    assert e.value.why.endswith("; `make weka-traces` writes it")
    other = tmp_path / "x.toml"
    other.write_text(src.read_text().replace(".cache/traces/weka-pair-k64", "mine"))
    with pytest.raises(ConfigError) as e:
        load_experiment(other)
    assert "make" not in e.value.why  # a trace of the user's own gets no such hint
