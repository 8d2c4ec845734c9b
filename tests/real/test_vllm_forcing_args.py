"""The parts of vLLM forcing and the tiny model that need neither vLLM nor torch (plain
`make test`): request validation, the adapter's request fields, the model shape's arithmetic."""

from __future__ import annotations

import pytest

from replay.engines import vllm
from replay.engines.tinymodel import TinyLlama, kv_bytes_per_token
from replay.engines.vllm_forcing import (
    PROCESSOR_FQCN,
    XARGS_KEY,
    ForcedOutputLogitsProcessor,
    forced_ids_from_extra_args,
    vllm_available,
)
from replay.errors import ConfigError
from replay.model.presets import get_model


def test_module_imports_without_vllm_and_refuses_to_run_there():
    if vllm_available():
        pytest.skip("vLLM is installed in this interpreter")
    with pytest.raises(RuntimeError, match="needs vLLM"):
        ForcedOutputLogitsProcessor(None, "cpu", False)


@pytest.mark.parametrize("extra", [None, {}, {"other": 1}])
def test_requests_without_the_key_are_not_forced(extra):
    assert forced_ids_from_extra_args(extra) is None


def test_a_list_of_ids_is_taken_as_is():
    assert forced_ids_from_extra_args({XARGS_KEY: [0, 5, 8191]}) == [0, 5, 8191]
    assert forced_ids_from_extra_args({XARGS_KEY: []}) == []


@pytest.mark.parametrize(
    "value, where",
    [
        ([1, "2"], "[1]"),
        ([1.0], "[0]"),
        ([-1], "[0]"),
        ([True], "[0]"),
        ("1,2", "list"),
        (3, "list"),
    ],
)
def test_bad_values_name_the_field_and_index(value, where):
    with pytest.raises(ValueError, match=f"vllm_xargs.{XARGS_KEY}") as e:
        forced_ids_from_extra_args({XARGS_KEY: value})
    assert where in str(e.value)


def test_the_adapter_sends_the_key_the_processor_reads():
    extras = vllm.request_extras(3, [7, 8, 9])
    assert extras["vllm_xargs"] == {XARGS_KEY: [7, 8, 9]}
    assert extras["return_token_ids"] is True
    assert extras["max_tokens"] == extras["min_tokens"] == 3 and extras["ignore_eos"] is True
    assert "vllm_xargs" not in vllm.request_extras(3, None)


def test_the_processor_name_points_at_the_class():
    module, _, name = PROCESSOR_FQCN.partition(":")
    assert module == ForcedOutputLogitsProcessor.__module__
    assert name == ForcedOutputLogitsProcessor.__qualname__


def test_tiny_model_kv_size_matches_the_model_preset():
    # 2 (K, V) x 2 layers x 2 KV heads x 64 head dim x 2 bytes
    assert kv_bytes_per_token(TinyLlama()) == 1024 == get_model("tiny-llama").bytes_per_token(1)
    assert kv_bytes_per_token(TinyLlama(dtype="float32")) == 2048


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"num_heads": 3}, "num_heads"),
        ({"num_kv_heads": 3}, "num_kv_heads"),
        ({"vocab_size": 100}, "vocab_size"),
        ({"dtype": "int8"}, "dtype"),
        ({"num_layers": 0}, "num_layers"),
    ],
)
def test_bad_tiny_model_shapes_are_refused_naming_the_field(kwargs, field):
    with pytest.raises(ConfigError, match=field):
        TinyLlama(**kwargs)
