"""experiments/vllm-cpu.toml loads, and each point launches vLLM in CPU mode as documented
(plain `make test`: nothing is started)."""

from __future__ import annotations

from replay.engines.registry import get_engine
from replay.engines.vllm_forcing import PROCESSOR_FQCN
from replay.model.presets import GIB
from replay.sweep.config import load_experiment
from replay.sweep.prepare import prediction_inputs
from tests.real.conftest import REPO

EXPERIMENT = REPO / "experiments" / "vllm-cpu.toml"


def _flag(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_three_device_sizes_each_launched_with_kv_cache_memory_bytes_and_forcing():
    exp = load_experiment(EXPERIMENT)
    points = exp.points()
    assert len(points) == 3
    sizes = []
    for point in points:
        engine, options, run = exp.resolve(point)
        assert engine == "vllm" and run["forcing"] is True
        spec = get_engine(engine).launch(options, "127.0.0.1", 8123)
        sizes.append(int(_flag(spec.argv, "--kv-cache-memory-bytes")))
        assert _flag(spec.argv, "--logits-processors") == PROCESSOR_FQCN
        assert _flag(spec.argv, "--max-num-seqs") == "1"
        assert "--enable-prefix-caching" in spec.argv and "--enforce-eager" in spec.argv
        assert spec.argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]  # not `vllm serve`
        assert spec.env["HF_HUB_OFFLINE"] == "1" and "VLLM_CACHE_ROOT" in spec.env
        # the longest request must fit the smallest cache (less vLLM's null block)
        assert int(_flag(spec.argv, "--max-model-len")) <= (min(sizes) // (128 * 1024) - 1) * 128
        # the pre-registered prediction sees the same device size
        inputs = prediction_inputs(exp, point)
        assert inputs["device_kv_gib"] * GIB == sizes[-1]
        assert inputs["model"] == "tiny-llama" and inputs["block_tokens"] == 128
    assert sizes == sorted(sizes) and len(set(sizes)) == 3
