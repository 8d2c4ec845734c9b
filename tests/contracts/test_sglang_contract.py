"""The SGLang adapter against the released SGLang sources (marker `contracts`).

SGLang 0.5.23 generates most server flags from dataclass fields (srt/arg_groups/fields/*.py,
`--field-name`, plus `Arg(aliases=...)`), and defines its counters in srt/observability/, its
OpenAI request and response models in srt/entrypoints/openai/protocol.py, and the custom logit
processor interface in srt/sampling/custom_logit_processor.py.
"""

from __future__ import annotations

import ast
import json
import pickle
from pathlib import Path

import numpy as np
import orjson
import pytest

from replay.driver.http_common import default_request_fields
from replay.engines import sglang, sglang_forcing
from tests.contracts.release import (
    arg_aliases,
    arg_field_flags,
    argparse_flags,
    check_fields,
    check_flag_types,
    check_flags,
    check_metric_kinds,
    check_metrics,
    dataclass_fields,
    flags_of,
    method_params,
    metric_base,
    metric_kinds,
    metric_names,
    names_both_versions,
    parse,
    py_files,
)

pytestmark = pytest.mark.contracts

ADAPTER = Path(sglang.__file__)
NUMERIC_FLAGS = {
    "--tp-size": "int",
    "--max-total-tokens": "int",
    "--mem-fraction-static": "float",
    "--page-size": "int",
    "--random-seed": "int",
    "--max-running-requests": "int",
    "--hicache-size": "int",  # integral GB: the adapter converts GiB and rounds
    "--port": "int",
}


def sglang_flags(root: Path) -> dict[str, str | None]:
    fields = py_files(root, "sglang/srt/arg_groups")
    # only the fields its Arg metadata makes flags (no_cli ones and fields without Arg are not)
    flags: dict[str, str | None] = dict(arg_field_flags(fields))
    for alias in arg_aliases(fields):
        flags.setdefault(alias, None)
    for flag, kind in argparse_flags([root / "sglang/srt/server_args.py", *fields]).items():
        flags.setdefault(flag, kind)
    return flags


def emitted_flags() -> set[str]:
    options = {
        "model": "m", "tp": 2, "device_kv_tokens": 1000, "mem_fraction_static": 0.8,
        "host_tier_gib": 4, "page_size": 64, "io_backend": "kernel", "seed": 1,
        "max_running_requests": 8, "served_model_name": "s",
    }  # fmt: skip
    return flags_of([ADAPTER], sglang.launch(options, "127.0.0.1", 30000).argv)


def test_every_flag_the_adapter_emits_is_defined_with_its_type(sglang_release):
    defined = sglang_flags(sglang_release.root)
    assert len(defined) > 100
    kw = sglang_release.versions()
    problems = check_flags(emitted_flags(), defined, adapter="replay/engines/sglang.py", **kw)
    problems += check_flag_types(NUMERIC_FLAGS, defined, **kw)
    assert problems == []
    assert (sglang_release.root / "sglang/launch_server.py").exists()


def test_a_renamed_flag_fails_naming_both_versions(sglang_release):
    defined = dict(sglang_flags(sglang_release.root))
    del defined["--hicache-size"]
    later = sglang_release.versions("0.6.0")
    problems = check_flags(emitted_flags(), defined, adapter="replay/engines/sglang.py", **later)
    assert names_both_versions(problems, "--hicache-size", **later)


def test_every_metric_the_mapping_reads_is_defined(sglang_release):
    defined = metric_names(py_files(sglang_release.root, "sglang/srt"), "sglang")
    read = metric_names([ADAPTER], "sglang") - sglang.LEGACY_METRICS
    assert "sglang:load_back_tokens_total" in read
    kw = sglang_release.versions()
    assert check_metrics(read, defined, adapter="replay/engines/sglang.py", **kw) == []
    renamed = check_metrics(read, defined - {"sglang:cached_tokens_total"}, adapter="a", **kw)
    assert names_both_versions(renamed, "sglang:cached_tokens_total", **kw)


def test_every_metric_is_read_with_the_suffix_of_its_kind(sglang_release):
    kinds = metric_kinds(py_files(sglang_release.root, "sglang/srt"), "sglang")
    read = metric_names([ADAPTER], "sglang") - sglang.LEGACY_METRICS
    assert read and all(metric_base(n) in kinds or n in kinds for n in read)  # each one checked
    kw = sglang_release.versions()
    assert check_metric_kinds(read, kinds, adapter="replay/engines/sglang.py", **kw) == []
    turned = {**kinds, "sglang:cached_tokens_total": "gauge", "sglang:cached_tokens": "gauge"}
    (problem,) = check_metric_kinds(read, turned, adapter="a", **kw)
    assert "sglang:cached_tokens_total" in problem and "gauge" in problem


def test_hicache_size_is_decimal_gb_per_rank(sglang_release):
    pool = (sglang_release.root / "sglang/srt/mem_cache/pool_host/base.py").read_text()
    assert "host_size * 1e9" in pool  # the unit the adapter converts GiB into
    assert sglang.hicache_size_gb(16) == 17 and sglang.hicache_size_gb(256) == 275
    # Each rank labels its own series: what the mapping's one-rank read relies on.
    collector = (sglang_release.root / "sglang/srt/observability/metrics_collector.py").read_text()
    assert '"tp_rank": parallel.tp_rank' in collector


PROTOCOL = "sglang/srt/entrypoints/openai/protocol.py"
PROCESSOR = "sglang/srt/sampling/custom_logit_processor.py"


def test_request_fields_exist_in_the_completion_request(sglang_release):
    fields = set(dataclass_fields([sglang_release.root / PROTOCOL], {"CompletionRequest"}))
    sent = set(sglang.request_extras(3, [1, 2, 3])) | {"prompt", "model", "stream"}
    sent |= set(default_request_fields("task", 3))  # what every call sends (the driver's fields)
    assert {"return_cached_tokens_details", "custom_logit_processor", "custom_params"} <= sent
    assert check_fields(sent, fields, model="CompletionRequest", **sglang_release.versions()) == []
    later = sglang_release.versions("0.6.0")
    fewer = fields - {"return_cached_tokens_details"}
    renamed = check_fields(sent, fewer, model="CompletionRequest", **later)
    assert names_both_versions(renamed, "return_cached_tokens_details", **later)


def test_token_id_prompts_usage_and_the_cache_reset_are_what_the_release_takes(sglang_release):
    """A list of ints is the prompt's token ids (not text), the usage chunk carries the cached
    count only with --enable-cache-report (which the adapter passes), `stream_options` has
    `include_usage`, and the adapter's reset path is a route."""
    serving = (
        sglang_release.root / "sglang/srt/entrypoints/openai/serving_completions.py"
    ).read_text()
    assert 'prompt_kwargs = {"input_ids": prompt}' in serving
    assert "enable_cache_report=get_serving().enable_cache_report" in serving
    assert "--enable-cache-report" in sglang.launch({"model": "m"}, "h", 1).argv
    fields = dataclass_fields([sglang_release.root / PROTOCOL], {"CompletionRequest"})
    assert fields["prompt"].startswith("Union[List[int],")
    assert "include_usage" in dataclass_fields([sglang_release.root / PROTOCOL], {"StreamOptions"})
    server = (sglang_release.root / "sglang/srt/entrypoints/http_server.py").read_text()
    assert f'@app.api_route("{sglang.ADAPTER.reset_path}", methods=["GET", "POST"])' in server


def test_the_smallest_max_tokens_is_what_the_completion_request_accepts(sglang_release):
    """/v1/completions' CompletionRequest refuses max_tokens <= 0 (its sampling parameters would
    take 0): the adapter asks a call recorded with 0 output tokens for 1."""
    tree = parse(sglang_release.root / PROTOCOL)
    request = next(
        n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "CompletionRequest"
    )
    check = next(
        n
        for n in request.body
        if isinstance(n, ast.FunctionDef) and n.name == "validate_max_tokens_positive"
    )
    assert "v <= 0" in ast.unparse(check)
    assert sglang.ADAPTER.min_max_tokens == 1


def test_cache_details_come_in_the_sglext_object_the_driver_reads(sglang_release):
    protocol = [sglang_release.root / PROTOCOL]
    kw = sglang_release.versions()
    for model, names in (
        ("CompletionStreamResponse", {"sglext", "usage", "choices"}),
        ("CompletionResponse", {"sglext", "usage"}),
        ("SglExt", {"cached_tokens_details"}),
        ("CachedTokensDetails", {"device", "host"}),
        ("CompletionResponseStreamChoice", {"token_ids"}),
    ):
        fields = set(dataclass_fields(protocol, {model}))
        assert check_fields(names, fields, model=model, **kw) == []
    # Streaming: the details come in a chunk of their own, with no choices, before usage.
    serving = (
        sglang_release.root / "sglang/srt/entrypoints/openai/serving_completions.py"
    ).read_text()
    assert "request.return_cached_tokens_details and cached_tokens_details" in serving
    assert "choices=[],  # sglext is at response level" in serving


def _release_loader(root: Path):
    """SGLang's own `_cache_from_str` (how the server turns the request's string into the
    processor class), compiled from the release source; dill where installed, else pickle,
    whose format dill reads too."""
    tree = parse(root / PROCESSOR)
    func = next(
        n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_cache_from_str"
    )
    func.decorator_list = []
    try:
        import dill
    except ImportError:
        dill = pickle
    namespace: dict = {"orjson": orjson, "dill": dill}
    exec(compile(ast.Module([func], []), str(root / PROCESSOR), "exec"), namespace)
    return namespace["_cache_from_str"]


def test_forcing_processor_matches_the_release_interface(sglang_release):
    source = sglang_release.root / PROCESSOR
    base = method_params(source, "CustomLogitProcessor")
    mine = method_params(Path(sglang_forcing.__file__), "ForcedOutputLogitProcessor")
    assert base["__call__"] == mine["__call__"] == ["self", "logits", "custom_param_list"]
    to_str = ast.unparse(next(
        n for n in ast.walk(parse(source)) if isinstance(n, ast.FunctionDef) and n.name == "to_str"
    ))  # fmt: skip
    assert "json.dumps({'callable': dill.dumps(cls).hex()})" in to_str  # the format we write
    # The scheduler hands the request to the processor; the sampler calls it with the rows.
    batch = (sglang_release.root / "sglang/srt/managers/schedule_batch.py").read_text()
    assert '"__req__": weakref.proxy(self)' in batch and "self.output_ids" in batch
    sampler = (sglang_release.root / "sglang/srt/layers/sampler.py").read_text()
    assert "result = entry.processor(selected, custom_params)" in sampler
    flags = sglang_flags(sglang_release.root)
    assert "--enable-custom-logit-processor" in flags
    assert "--enable-custom-logit-processor" in sglang.launch({"model": "m"}, "h", 1).argv

    # Exercised: the release's loader builds our class from the request's string, and the
    # instance forces the recorded ids when called as the sampler calls it.
    processor = _release_loader(sglang_release.root)(sglang.FORCING_PROCESSOR)()
    assert json.loads(sglang.FORCING_PROCESSOR).keys() == {"callable"}

    class Req:
        output_ids: list[int] = []

    req = Req()
    forced = [3, 0, 7]
    params = [{sglang_forcing.PARAM: forced, "__req__": req}]
    for _ in forced:
        logits = np.random.default_rng(len(req.output_ids)).normal(size=(1, 8))
        req.output_ids = [*req.output_ids, int(np.argmax(processor(logits, params)[0]))]
    assert req.output_ids == forced


def test_the_labels_and_values_the_mapping_reads(sglang_release):
    """`map_counters` selects series by label: cache_source=device|host|total on
    cached_tokens_total, pool=kv on the HiCache counters, one tp_rank. A renamed label or value
    reads as zero, silently, so the release must still spell them so."""
    root = sglang_release.root / "sglang/srt"
    collector = (root / "observability/metrics_collector.py").read_text()
    assert 'labelnames=list(labels.keys()) + ["cache_source"]' in collector
    for source in ("device", "host"):
        assert f'report_cache_source("{source}"' in collector
    assert '"cache_source": "total"' in collector  # a request without a split
    assert collector.count('labelnames=list(labels.keys()) + ["pool"]') >= 2  # load back, backup
    assert '"tp_rank"' in collector
    storage = (root / "mem_cache/hicache_storage.py").read_text()
    assert 'KV = "kv"' in storage  # PoolName.KV, the pool label of the KV cache's transfers
    controller = (root / "managers/cache_controller.py").read_text()
    assert "return {PoolName.KV.value: len(op.device_indices)}" in controller


def test_the_flag_reader_takes_only_the_fields_sglang_registers(tmp_path):
    """A field SGLang keeps off the command line (`Arg(no_cli=True)`, or no Arg at all) is not a
    flag, and `cli_name` renames one: the reader took every field as `--field-name`."""
    src = tmp_path / "fields.py"
    src.write_text(
        "class F:\n"
        '    plain: A[int, "help"] = 0\n'
        "    hidden: A[int, Arg(no_cli=True)] = 0\n"
        '    renamed: Annotated[float, Arg(cli_name="--other-name", help="h")] = 0.0\n'
        "    bare: int = 0\n"
    )
    assert arg_field_flags([src]) == {"--plain": "int", "--other-name": "float"}
