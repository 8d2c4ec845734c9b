"""Bad experiment files are refused by `replay sweep --dry-run` before anything starts: exit 2 and
one line `replay: FILE[:LINE]: key.path: why`, never a traceback. The shipped experiment files
still validate and plan exactly the commands they planned before the schema existed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from replay.errors import ConfigError
from replay.sweep.config import load_experiment, toml_line
from replay.sweep.dryrun import dry_run_plan, format_plan
from tests.shared_data import in_ci

ROOT = Path(__file__).resolve().parent.parent
PLANS = Path(__file__).parent / "fixtures" / "sweep_plans"

BASE = """\
name = "bad"
repeats = 1
[trace]
synth = { preset = "swe-agent", tasks = 2, seed = 1 }
[run]
pool = 2
timing = "think"
[engine]
kind = "sim"
device_kv_gib = 1.0
kappa = 8
[matrix]
host_tier_gib = [0, 2]
[timeouts]
run_s = 60
[warmup]
reset_cache = true
[predict]
enabled = true
"""

SIM_ENGINE = 'kind = "sim"\ndevice_kv_gib = 1.0\nkappa = 8'

# (name, (old, new) in BASE, the key path the error must name)
CASES = [
    ("timing", ('timing = "think"', 'timing = "bogus"'), "run.timing"),
    ("gap_scale_negative", ("pool = 2", "pool = 2\ngap_scale = -1"), "run.gap_scale"),
    ("gap_scale_string", ("pool = 2", 'pool = 2\ngap_scale = "fast"'), "run.gap_scale"),
    ("request_timeout", ("pool = 2", "pool = 2\nrequest_timeout_s = -5"), "run.request_timeout_s"),
    ("transport", ("pool = 2", 'pool = 2\ntransport = "pigeon"'), "run.transport"),
    ("strict_string", ("pool = 2", 'pool = 2\nstrict = "yes"'), "run.strict"),
    ("predict_enabled", ("enabled = true", 'enabled = "no"'), "predict.enabled"),
    ("reset_cache", ("reset_cache = true", 'reset_cache = "no"'), "warmup.reset_cache"),
    ("kappa_fraction", ("kappa = 8", "kappa = 1.5"), "engine.kappa"),
    ("kappa_fraction_swept", ("host_tier_gib = [0, 2]", "kappa = [8, 1.5]"), "matrix.kappa"),
    ("run_s_zero", ("run_s = 60", "run_s = 0"), "timeouts.run_s"),
    ("tier_inf", ("host_tier_gib = [0, 2]", "host_tier_gib = [inf, 2]"), "matrix.host_tier_gib"),
    ("tier_huge", ("host_tier_gib = [0, 2]", "host_tier_gib = [0, 1e300]"), "matrix.host_tier_gib"),
    ("tier_nan", ("host_tier_gib = [0, 2]", "host_tier_gib = [nan, 2]"), "matrix.host_tier_gib"),
    ("device_huge", ("host_tier_gib = [0, 2]", "device_kv_gib = [1, 1e300]"), "matrix.device_kv_gib"),
    ("trace_is_a_directory", ('synth = { preset = "swe-agent", tasks = 2, seed = 1 }', 'path = "."'), "trace.path"),
    ("engine_kind_number", ('kind = "sim"', "kind = 3"), "engine.kind"),
    ("synth_seed_negative", ("tasks = 2, seed = 1", "tasks = 2, seed = -1"), "trace.synth.seed"),
    ("engine_seed_negative", ("kappa = 8", "kappa = 8\nseed = -3"), "engine.seed"),
    ("predict_tp", ("enabled = true", 'enabled = true\ntp = "eight"'), "predict.tp"),
    ("tier_same_name", ("host_tier_gib = [0, 2]", "host_tier_gib = [2, 2.0]"), "matrix.host_tier_gib"),
    ("missing_trace", ('synth = { preset = "swe-agent", tasks = 2, seed = 1 }', 'path = "no/such.jsonl"'), "trace.path"),
    ("synth_keyword", ("seed = 1 }", "seed = 1, speed = 3 }"), "trace.synth.speed"),
    ("synth_type", ("tasks = 2,", 'tasks = "many",'), "trace.synth.tasks"),
    ("synth_preset", ('preset = "swe-agent"', 'preset = "nope"'), "trace.synth.preset"),
    ("synth_fold", ("seed = 1 }", "seed = 1, fold = { every = 0 } }"), "trace.synth.fold.every"),
    ("env_in_process", ("kappa = 8", 'kappa = 8\nenv = { A = "1" }'), "engine.env"),
    ("pool_fraction", ("pool = 2", "pool = 2.5"), "run.pool"),
    ("on_error", ("pool = 2", 'pool = 2\non_error = "panic"'), "run.on_error"),
    ("max_rps_zero", ("pool = 2", "pool = 2\nmax_rps = 0"), "run.max_rps"),
    ("ready_negative", ("run_s = 60", "run_s = 60\nready_s = -1"), "timeouts.ready_s"),
    ("port_range", ("[predict]", "[server]\nport = 70000\n[predict]"), "server.port"),
    ("order", ("repeats = 1", 'repeats = 1\norder = "shuffled"'), "order"),
    ("warmup_requests", ("reset_cache = true", "reset_cache = true\nrequests = -1"), "warmup.requests"),
    ("predict_order", ("enabled = true", 'enabled = true\norder = "random"'), "predict.order"),
    ("engine_option_inf", ("device_kv_gib = 1.0", "device_kv_gib = inf"), "engine.device_kv_gib"),
    ("engine_not_a_name", ("host_tier_gib = [0, 2]", 'engine = ["sim", 3]'), "matrix.engine"),
    ("external_without_url", ('kind = "sim"\ndevice_kv_gib = 1.0\nkappa = 8\n[matrix]\nhost_tier_gib = [0, 2]', 'kind = "external"'), "engine.url"),
    ("launched_option_type", (SIM_ENGINE, 'kind = "vllm"\nmodel = "m"\ndevice_kv_gib = "big"'), "engine.device_kv_gib"),
    # a launched engine's options became command-line text as written (tp = true gave
    # --tensor-parallel-size true; enforce_eager = "false" added the flag), or a traceback
    ("vllm_bool_as_string", (SIM_ENGINE, 'kind = "vllm"\nmodel = "m"\nenforce_eager = "false"'), "engine.enforce_eager"),
    ("vllm_tp_bool", (SIM_ENGINE, 'kind = "vllm"\nmodel = "m"\ntp = true'), "engine.tp"),
    ("vllm_tp_fraction", (SIM_ENGINE, 'kind = "vllm"\nmodel = "m"\ntp = 2.5'), "engine.tp"),
    ("vllm_capacity_negative", (SIM_ENGINE, 'kind = "vllm"\nmodel = "m"\ndevice_kv_gib = -16'), "engine.device_kv_gib"),
    ("vllm_env_list", (SIM_ENGINE, 'kind = "vllm"\nmodel = "m"\nenv = ["A"]'), "engine.env"),
    ("sglang_fraction_past_one", (SIM_ENGINE, 'kind = "sglang"\nmodel = "m"\nmem_fraction_static = 5'), "engine.mem_fraction_static"),
    ("lmcache_chunk_fraction", (SIM_ENGINE, 'kind = "lmcache"\nmodel = "m"\nchunk_tokens = 2.7'), "engine.chunk_tokens"),
    ("llamacpp_tier_not_whole_mib", (SIM_ENGINE + "\n[matrix]\nhost_tier_gib = [0, 2]", 'kind = "llamacpp"\nmodel = "m"\n[matrix]\nhost_tier_gib = [0, 0.0001]'), "matrix.host_tier_gib"),
    ("pool_past_64_bits", ("pool = 2", "pool = 36893488147419103232"), "run.pool"),
    ("name_dot", ('name = "bad"', 'name = "."'), "name"),
    ("repeats_huge", ("repeats = 1", "repeats = 100000000000"), "repeats"),
    ("synth_scale_negative", ("tasks = 2, seed = 1", "tasks = 2, seed = 1, scale = -1.0"), "trace.synth.scale"),
    ("synth_vocab_zero", ("tasks = 2, seed = 1", "tasks = 2, seed = 1, vocab_size = 0"), "trace.synth.vocab_size"),
    # a table for an engine that no point runs was never read: its typo stood unnoticed
    ("engine_table_unused_typo", ("kappa = 8", 'kappa = 8\n[engine.vllm]\nbogus = 3'), "engine.vllm.bogus"),
    ("predict_model_unknown", ("enabled = true", 'enabled = true\nmodel = "qwen-typo"'), "predict.model"),
    ("repeats_bool", ("repeats = 1", "repeats = true"), "repeats"),
    ("matrix_table_value", ("host_tier_gib = [0, 2]", "host_tier_gib = [0, { a = 1 }]"), "matrix.host_tier_gib"),
    ("unknown_table_key", ("run_s = 60", "run_s = 60\nrun_h = 1"), "timeouts.run_h"),
]  # fmt: skip


def _expected_line(text: str, new: str, key_path: str) -> int | None:
    """The one line of the changed file that the change wrote and that names the key, if one."""
    leaf = key_path.split(".")[-1]
    new_lines = [line for line in new.split("\n") if leaf in line]
    changed = [i for i, line in enumerate(text.splitlines(), 1) if line in new_lines]
    return changed[0] if len(changed) == 1 else None


def _sweep(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "replay.cli.main", "sweep", str(path), "--dry-run"],
        capture_output=True, text=True, timeout=120, cwd=path.parent,
    )  # fmt: skip


def test_base_file_is_valid(tmp_path):
    """The cases below differ from a file that passes, so each fails for its own change."""
    p = tmp_path / "bad.toml"
    p.write_text(BASE)
    out = _sweep(p)
    assert out.returncode == 0, out.stderr
    assert "2 points x 1 repeat" in out.stdout


@pytest.mark.parametrize(("name", "change", "key_path"), CASES, ids=[c[0] for c in CASES])
def test_bad_value_is_one_line_exit_2(tmp_path, name, change, key_path):
    old, new = change
    assert BASE.count(old) == 1
    text = BASE.replace(old, new)
    p = tmp_path / "bad.toml"
    p.write_text(text)
    out = _sweep(p)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stdout == ""
    assert "Traceback" not in out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    m = re.fullmatch(rf"replay: {re.escape(str(p))}(?::(\d+))?: ([^:]+): (.+)", lines[0])
    assert m, lines[0]
    assert m.group(2) == key_path
    # where the changed text is one line that writes the named key, the error points at it
    line = _expected_line(text, new, key_path)
    if line is not None:
        assert m.group(1) is not None and int(m.group(1)) == line


def test_toml_errors_carry_the_parsers_line(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text(BASE.replace('timing = "think"', "timing = "))
    with pytest.raises(ConfigError) as e:
        load_experiment(p)
    assert e.value.where == f"{p}:7"


def test_toml_line_finds_tables_keys_and_inline_tables():
    assert toml_line(BASE, "run.timing") == 7
    assert toml_line(BASE, "trace.synth.speed") == 4  # inside the inline table on line 4
    assert toml_line(BASE, "matrix.host_tier_gib") == 13
    assert toml_line(BASE, "timeouts") == 14
    assert toml_line(BASE, "server.port") is None
    assert toml_line('[engine.vllm]\npython = "p"\n', "engine.vllm.python") == 2


def test_same_point_name_is_refused_but_distinct_values_pass(tmp_path):
    p = tmp_path / "ok.toml"
    p.write_text(BASE.replace("host_tier_gib = [0, 2]", "host_tier_gib = [2, 2.5]"))
    assert [x.name for x in load_experiment(p).points()] == [
        "host_tier_gib=2",
        "host_tier_gib=2.5",
    ]


@pytest.mark.parametrize(
    "path", sorted((ROOT / "experiments").glob("*.toml")), ids=lambda p: p.stem
)
def test_shipped_experiments_plan_what_they_planned(path, monkeypatch):
    """Plans captured with `replay sweep --dry-run` before the schema; the interpreter's path is
    the only machine-specific part."""
    monkeypatch.chdir(ROOT)
    made = ROOT / ".cache" / "traces"  # traces made from ../shared by `make weka-traces`
    if path.stem.startswith("weka-") and not made.is_dir():
        msg = f"{path.name} replays a trace `make weka-traces` makes into {made}"
        if in_ci():
            pytest.fail(msg + "; CI makes it before the tests", pytrace=False)
        pytest.skip(msg)
    exp = load_experiment(path.relative_to(ROOT))
    text = format_plan(exp, dry_run_plan(exp)) + "\n"
    want = (PLANS / f"{path.stem}.txt").read_text().replace("{python}", sys.executable)
    assert text == want


def test_most_cases_check_the_line():
    """The line assertion above applies to most cases (it is not vacuous)."""
    lines = [_expected_line(BASE.replace(*change), change[1], key) for _, change, key in CASES]
    assert sum(x is not None for x in lines) >= 20


def test_a_byte_order_mark_is_named(tmp_path):
    """An editor's UTF-8 BOM gave 'not valid TOML: Invalid statement (at line 1, column 1)'."""
    p = tmp_path / "bad.toml"
    p.write_bytes(b"\xef\xbb\xbf" + BASE.encode())
    out = _sweep(p)
    assert out.returncode == 2 and "byte-order mark" in out.stderr and "without BOM" in out.stderr
