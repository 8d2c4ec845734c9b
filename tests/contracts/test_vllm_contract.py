"""The vLLM and LMCache adapters against the released vLLM and LMCache sources (marker `contracts`).

Every flag the adapters can emit, every metric name they read (beside the declared fallbacks for
older releases), every request field they send, and the forcing processors' interfaces are looked
up in the release's own definitions; a miss names the flag or metric and both versions.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from replay.driver.http_common import default_request_fields
from replay.driver.options import task_identity_fields
from replay.engines import lmcache, vllm, vllm_forcing, vllm_forcing_v2
from tests.contracts.release import (
    abstract_methods,
    argparse_flags,
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

REPO = Path(__file__).resolve().parents[2]
ADAPTERS = {"vllm": REPO / "replay/engines/vllm.py", "lmcache": REPO / "replay/engines/lmcache.py"}
V2_DIR = "vllm/v1/worker/gpu/sample/logits_processor"
# Flags whose value the adapter writes as a number: the release must declare that type.
NUMERIC_FLAGS = {
    "--tensor-parallel-size": "int",
    "--gpu-memory-utilization": "float",
    "--max-model-len": "int",
    "--max-num-seqs": "int",
    "--max-num-batched-tokens": "int",
    "--block-size": "int",
    "--seed": "int",
    "--kv-cache-memory-bytes": "int",
    "--kv-offloading-size": "float",
    "--port": "int",
}
FULL_OPTIONS = {
    "model": "m",
    "tp": 2,
    "device_kv_gib": 1,  # gpu_memory_utilization is refused beside it (its literal is checked)
    "host_tier_gib": 4,
    "max_model_len": 4096,
    "max_num_seqs": 8,
    "max_num_batched_tokens": 2048,
    "block_size": 16,
    "enforce_eager": True,
    "load_format": "dummy",
    "seed": 1,
    "dtype": "bfloat16",
    "served_model_name": "s",
}


def vllm_flags(root: Path) -> dict[str, str | None]:
    """{flag: declared type} of vLLM's server: argparse calls in engine/ and entrypoints/, typed
    by EngineArgs' fields where the call passes generated kwargs, plus the frontend flags that
    `add_cli_args` generates from the FrontendArgs dataclass fields."""
    engine_fields = dataclass_fields([root / "vllm/engine/arg_utils.py"], {"EngineArgs"})
    flags = argparse_flags(py_files(root, "vllm/engine", "vllm/entrypoints"))
    for flag, kind in list(flags.items()):
        if kind is None:
            flags[flag] = engine_fields.get(flag[2:].replace("-", "_"))
    frontend = dataclass_fields(
        [root / "vllm/entrypoints/common/cli_args.py"], {"BaseFrontendArgs", "FrontendArgs"}
    )
    for field, kind in frontend.items():
        flags.setdefault("--" + field.replace("_", "-"), kind)
    return flags


def emitted_flags(name: str) -> set[str]:
    """Flags in the adapter's source (every literal) and in a launch with every option set."""
    module = vllm if name == "vllm" else lmcache
    argv = module.launch(FULL_OPTIONS, "127.0.0.1", 8000).argv
    return flags_of([ADAPTERS[name], ADAPTERS["vllm"]], argv)


@pytest.mark.parametrize("name", ["vllm", "lmcache"])
def test_every_flag_the_adapter_emits_is_defined(vllm_release, name):
    defined = vllm_flags(vllm_release.root)
    assert len(defined) > 100  # the reader found the release's definitions at all
    problems = check_flags(
        emitted_flags(name), defined, adapter=f"replay/engines/{name}.py", **vllm_release.versions()
    )
    assert problems == []


def test_numeric_flags_have_the_type_the_adapter_writes(vllm_release):
    defined = vllm_flags(vllm_release.root)
    assert check_flag_types(NUMERIC_FLAGS, defined, **vllm_release.versions()) == []


def test_a_renamed_flag_fails_naming_the_flag_and_both_versions(vllm_release):
    defined = dict(vllm_flags(vllm_release.root))
    # A release that renamed the flag: the adapter's name is gone from its definitions.
    defined["--kv-offloading-gib"] = defined.pop("--kv-offloading-size")
    later = vllm_release.versions("0.99.0")
    problems = check_flags(
        emitted_flags("vllm"), defined, adapter="replay/engines/vllm.py", **later
    )
    assert names_both_versions(problems, "--kv-offloading-size", **later)
    # And an adapter that emits a name the release never had.
    doctored = check_flags(
        {"--kv-offloading-sizes"}, vllm_flags(vllm_release.root), adapter="a",
        **{**vllm_release.versions(), "pinned": "0.32.0"},
    )  # fmt: skip
    assert doctored and "--kv-offloading-sizes" in doctored[0] and "0.32.0" in doctored[0]


def test_every_metric_the_mapping_reads_is_defined(vllm_release, lmcache_release):
    defined = metric_names(py_files(vllm_release.root, "vllm"), "vllm")
    read = metric_names([ADAPTERS["vllm"]], "vllm") - vllm.LEGACY_METRICS
    assert "vllm:kv_offload_store_bytes_total" in read  # the names below are really checked
    vllm_kw = vllm_release.versions()
    problems = check_metrics(read, defined, adapter="replay/engines/vllm.py", **vllm_kw)
    lm_reads = metric_names([ADAPTERS["lmcache"]], "vllm")
    problems += check_metrics(lm_reads, defined, adapter="replay/engines/lmcache.py", **vllm_kw)
    lm_defined = metric_names(py_files(lmcache_release.root, "lmcache"), "lmcache")
    problems += check_metrics(
        metric_names([ADAPTERS["lmcache"]], "lmcache"), lm_defined,
        adapter="replay/engines/lmcache.py", **lmcache_release.versions(),
    )  # fmt: skip
    assert problems == []


def test_every_metric_is_read_with_the_suffix_of_its_kind(vllm_release, lmcache_release):
    """A counter's `_total`, a histogram's `_sum`: a metric that changed kind keeps its name, so
    only its kind tells that the sample the mapping reads is gone."""
    kinds = metric_kinds(py_files(vllm_release.root, "vllm"), "vllm")
    read = metric_names([ADAPTERS["vllm"], ADAPTERS["lmcache"]], "vllm") - vllm.LEGACY_METRICS
    checked = {n for n in read if metric_base(n) in kinds}
    assert {"vllm:prompt_tokens_cached_by_source_total", "vllm:prefix_cache_hits_total"} <= checked
    assert "vllm:request_prefill_kv_computed_tokens_sum" in checked  # a histogram's, too
    kw = vllm_release.versions()
    assert check_metric_kinds(read, kinds, adapter="replay/engines/vllm.py", **kw) == []
    lm_kinds = metric_kinds(py_files(lmcache_release.root, "lmcache"), "lmcache")
    lm_read = metric_names([ADAPTERS["lmcache"]], "lmcache")
    assert lm_read and lm_read <= {f"{n}_total" for n in lm_kinds}
    lm_kw = lmcache_release.versions()
    assert check_metric_kinds(lm_read, lm_kinds, adapter="lmcache.py", **lm_kw) == []
    turned = {**kinds, "vllm:prefix_cache_hits": "histogram"}
    (problem,) = check_metric_kinds(read, turned, adapter="a", **kw)
    assert "vllm:prefix_cache_hits_total" in problem and "histogram" in problem


def test_a_renamed_metric_fails_naming_the_metric_and_both_versions(vllm_release):
    defined = metric_names(py_files(vllm_release.root, "vllm"), "vllm")
    defined -= {"vllm:kv_offload_store_bytes"}
    read = metric_names([ADAPTERS["vllm"]], "vllm") - vllm.LEGACY_METRICS
    later = vllm_release.versions("0.99.0")
    problems = check_metrics(read, defined, adapter="replay/engines/vllm.py", **later)
    assert names_both_versions(problems, "vllm:kv_offload_store_bytes_total", **later)


def test_lmcache_settings_and_reset_facts(vllm_release, lmcache_release):
    """The environment variables the adapter sets are LMCache config keys, the size is GiB per
    worker, and vLLM's LMCache connector has no reset_cache of its own (why no reset is done)."""
    config = parse(lmcache_release.root / "lmcache/v1/config.py")
    keys = {
        n.value
        for n in ast.walk(config)
        if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }
    env = lmcache.launch({"model": "m", "host_tier_gib": 4}, "h", 1).env
    for var in (k for k in env if k.startswith("LMCACHE_")):
        assert var[len("LMCACHE_") :].lower() in keys, var
    backend = (lmcache_release.root / "lmcache/v1/storage_backend/local_cpu_backend.py").read_text()
    assert "cpu_size * 1024**3" in backend  # GiB per worker, as host_tier_gib
    connector = (
        vllm_release.root / "vllm/distributed/kv_transfer/kv_connector/v1/lmcache_connector.py"
    )
    assert "reset_cache" not in method_params(connector, "LMCacheConnectorV1")
    assert lmcache.ADAPTER.reset_path is None


def completion_fields(root: Path, module: str, cls: str) -> set[str]:
    """Fields of request model `cls` and its bases (resolved by name within `module`'s package)."""
    classes = {
        node.name: node
        for path in py_files(root, module)
        for node in ast.walk(parse(path))
        if isinstance(node, ast.ClassDef)
    }
    fields: set[str] = set()
    todo = [cls]
    while todo:
        node = classes.get(todo.pop())
        if node is None:
            continue
        fields |= {
            s.target.id
            for s in node.body
            if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
        }
        todo += [ast.unparse(b).split(".")[-1] for b in node.bases]
    return fields


def test_request_fields_exist_in_the_completion_request(vllm_release):
    fields = completion_fields(vllm_release.root, "vllm/entrypoints", "CompletionRequest")
    sent = set(vllm.request_extras(4, [1, 2, 3, 4])) | {"prompt", "model", "stream"}
    sent |= set(task_identity_fields("task", {}))  # lmcache runs: the study's connector reads it
    sent |= set(default_request_fields("task", 4))  # what every call sends (the driver's fields)
    assert sent - fields == set()


def test_a_prompt_of_token_ids_and_usage_in_the_stream_are_what_the_release_takes(vllm_release):
    """The driver sends each prompt as a list of token ids and reads the cached tokens from the
    last chunk's usage: `prompt` takes `list[int]`, `stream_options.include_usage` asks for that
    chunk, and the cached count is in it only with --enable-prompt-tokens-details."""
    protocol = vllm_release.root / "vllm/entrypoints/openai/completion/protocol.py"
    request = next(
        n
        for n in ast.walk(parse(protocol))
        if isinstance(n, ast.ClassDef) and n.name == "CompletionRequest"
    )
    prompt = next(
        s for s in request.body
        if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and s.target.id == "prompt"
    )  # fmt: skip
    assert "list[Annotated[int, Field(ge=0)]]" in ast.unparse(prompt.annotation)
    options = dataclass_fields(py_files(vllm_release.root, "vllm/entrypoints"), {"StreamOptions"})
    assert "include_usage" in options
    serving = (vllm_release.root / "vllm/entrypoints/openai/completion/serving.py").read_text()
    assert "if self.enable_prompt_tokens_details and num_cached_tokens is not None:" in serving
    assert "--enable-prompt-tokens-details" in vllm.launch({"model": "m"}, "h", 1).argv


def test_an_id_past_the_vocabulary_gets_the_words_the_simulator_server_answers(vllm_release):
    """`replay sim serve --vocab-size N` refuses a prompt id >= N as vLLM does: 400 with this
    message (the server maps VLLMValidationError to 400 with its parameter)."""
    text = (vllm_release.root / "vllm/renderers/base.py").read_text()
    assert 'f"Token id {max_input_id} is out of vocabulary", parameter=parameter' in text
    assert "max_token_id = self.model_config.get_vocab_size() - 1" in text


def test_the_simulator_servers_answers_are_the_releases(vllm_release):
    """`replay sim serve` answers as vLLM 0.33 does (docs/simulator.md): the output cut to what
    --max-model-len leaves, the length refusals' words, the unknown model's 404, the media-type
    check, the error type, the request id header and the reset's body."""
    root = vllm_release.root / "vllm"

    def one_line(path: str) -> str:
        return " ".join((root / path).read_text().split())

    api = one_line("entrypoints/serve/utils/api_utils.py")
    assert "model_max_tokens = max_model_len - input_length" in api  # get_max_tokens
    assert "Unsupported Media Type: Only 'application/json' is allowed" in api
    params = one_line("renderers/params.py")
    assert (
        'f"cannot be greater than " f"{self.max_total_tokens_param}={max_total_tokens}. "' in params
    )
    assert "exceeds this limit even without any output tokens. " in params
    assert "However, your prompt " in params
    completion = one_line("entrypoints/openai/completion/protocol.py")
    assert (
        'max_total_tokens_param="max_model_len", max_output_tokens_param="max_tokens"' in completion
    )
    serving = one_line("entrypoints/serve/engine/serving.py")
    assert (
        'f"The model `{request.model}` does not exist. " f"Valid aliases: {served_names}."'
        in serving
    )
    assert 'raw_request.headers.get("X-Request-Id")' in serving
    errors = one_line("entrypoints/serve/exception_handling/error_response.py")
    assert 'err_type: str = "BadRequestError"' in errors
    reset = one_line("entrypoints/serve/dev/cache/api_router.py")
    assert 'JSONResponse(content={"success": bool(success)})' in reset


def test_a_one_token_request_meets_a_per_token_objective_in_vllms_goodput(vllm_release):
    """`replay run --slo itl=...` counts a call of one output token as meeting the objective,
    citing vLLM's benchmark, which takes its time per output token as 0 for goodput."""
    serve = (vllm_release.root / "vllm/benchmarks/serve.py").read_text()
    assert "# Note: if output_len <= 1, we regard tpot as 0 for goodput" in serve
    assert "valid_metrics.append(all_tpots)" in serve


def test_the_native_cpu_offload_counts_its_hits_as_host(vllm_release):
    """Host restores are read from prompt_tokens_cached_by_source{source="host"}: vLLM makes
    every source's series at 0, so a backend that labelled its hits otherwise (external, disk)
    would read as no restores at all, with no error."""
    manager = vllm_release.root / "vllm/v1/kv_offload/cpu/manager.py"
    load_source = next(
        n for n in ast.walk(parse(manager))
        if isinstance(n, ast.FunctionDef) and n.name == "get_load_source"
    )  # fmt: skip
    assert ast.unparse(load_source).rstrip().endswith("return CacheHitSource.HOST")
    # the adapter's `--kv-offloading-backend native` is a valid value and picks that manager's
    # connector (VLLM_USE_SIMPLE_KV_OFFLOAD, which the adapter never sets, picks another)
    cache = (vllm_release.root / "vllm/config/cache.py").read_text()
    assert 'KVOffloadingBackend = Literal["native", "lmcache"]' in cache
    config = (vllm_release.root / "vllm/config/vllm.py").read_text()
    assert 'if kv_offloading_backend == "native":' in config
    argv = vllm.launch({"model": "m", "host_tier_gib": 1}, "h", 1).argv
    assert argv[argv.index("--kv-offloading-backend") + 1] == "native"
    env = vllm.launch({"model": "m", "host_tier_gib": 1}, "h", 1).env
    assert "VLLM_USE_SIMPLE_KV_OFFLOAD" not in env


def test_device_hits_and_computed_prompt_tokens_count_each_request_once(vllm_release):
    """docs/simulator.md (Counters) says vLLM counts a request's device hits and computed prompt
    tokens once, at its first scheduling, while the simulator's counters count each admission:
    a preempted request's hits go to separate `preempted_*` fields that no exported counter
    adds, and `local_compute` is a request's prompt less its cached tokens."""
    stats = vllm_release.root / "vllm/v1/metrics/stats.py"
    record = next(
        n for n in ast.walk(parse(stats))
        if isinstance(n, ast.FunctionDef) and n.name == "record"
        and "preempted" in [a.arg for a in n.args.args]
    )  # fmt: skip
    body = ast.unparse(record)
    early = body.index("if preempted:")
    assert body.index("self.preempted_hits += num_hits") > early
    assert body.index("return", early) < body.index("self.hits += num_hits")
    assert "self.num_computed_tokens = num_prompt_tokens - num_cached_tokens" in stats.read_text()
    loggers = (vllm_release.root / "vllm/v1/metrics/loggers.py").read_text()
    assert "preempted_hits" not in loggers  # no exported counter adds them back


def test_the_cache_sizes_mean_what_the_adapter_writes(vllm_release):
    """The adapter passes --kv-cache-memory-bytes and refuses gpu_memory_utilization beside it,
    and writes --kv-offloading-size as host_tier_gib x tp (docs/engines.md): the release's
    CacheConfig says the first ignores the second, and the offload size is the sum over ranks."""
    cache = " ".join((vllm_release.root / "vllm/config/cache.py").read_text().split())
    assert "Note that kv_cache_memory_bytes (when not-None) ignores gpu_memory_utilization" in cache
    assert "When TP > 1, this is the total buffer size summed across all TP ranks." in cache


def test_the_lmcache_connector_and_its_reset(vllm_release):
    """`lmcache` points name the connector LMCacheConnectorV1 (registered under that name) and
    have no cache reset: its reset_cache returns None, which the scheduler takes as done."""
    factory = (
        vllm_release.root / "vllm/distributed/kv_transfer/kv_connector/factory.py"
    ).read_text()
    assert re.search(r'register_connector\(\s*"LMCacheConnectorV1",', factory)
    scheduler = (vllm_release.root / "vllm/v1/core/sched/scheduler.py").read_text()
    assert "if self.connector.reset_cache() is False:" in scheduler


def test_the_source_label_the_mapping_selects_by(vllm_release):
    """map_counters reads device and host hits and computed prefill by the label `source`."""
    loggers = (vllm_release.root / "vllm/v1/metrics/loggers.py").read_text()
    for name in ("vllm:prompt_tokens_by_source", "vllm:prompt_tokens_cached_by_source"):
        block = loggers[loggers.index(f'name="{name}"') :][:600]
        assert 'labelnames=labelnames + ["source"]' in block, name


def test_the_smallest_max_tokens_is_what_sampling_params_accepts(vllm_release):
    """The adapters ask a call recorded with 0 output tokens for `min_max_tokens`: the release's
    SamplingParams must refuse max_tokens below exactly that."""
    source = (vllm_release.root / "vllm/sampling_params.py").read_text()
    assert "if self.max_tokens is not None and self.max_tokens < 1:" in source
    assert vllm.ADAPTER.min_max_tokens == lmcache.ADAPTER.min_max_tokens == 1


def test_lmcache_counts_late_by_its_stats_interval_which_the_end_scrape_waits(lmcache_release):
    engine = (lmcache_release.root / "lmcache/v1/cache_engine.py").read_text()
    assert "log_interval=10," in engine  # LMCacheStatsLogger's, hard-coded
    logger = (lmcache_release.root / "lmcache/observability.py").read_text()
    assert "self.shutdown_event.wait(self.log_interval)" in logger
    assert lmcache.ADAPTER.metrics_lag_s > 10


def test_v2_processor_matches_the_release_interface_by_ast(vllm_release):
    interface = vllm_release.root / V2_DIR / "interface.py"
    ours = Path(vllm_forcing_v2.__file__)
    base = method_params(interface, "LogitsProcessor")
    mine = method_params(ours, "ForcedOutputLogitsProcessorV2")
    assert abstract_methods(interface, "LogitsProcessor") <= set(mine)
    for name in set(base) & set(mine):
        assert mine[name] == base[name], (name, base[name], mine[name])
    # The loader refuses anything that is not a subclass of the interface module's class; ours
    # subclasses exactly that import path.
    loader = parse(vllm_release.root / V2_DIR / "loader.py")
    imported = {
        (n.module, a.name)
        for n in ast.walk(loader)
        if isinstance(n, ast.ImportFrom)
        for a in n.names
    }
    assert (V2_DIR.replace("/", ".") + ".interface", "LogitsProcessor") in imported
    mine_imports = {
        (n.module, a.name)
        for n in ast.walk(parse(ours))
        if isinstance(n, ast.ImportFrom)
        for a in n.names
    }
    assert (V2_DIR.replace("/", ".") + ".interface", "LogitsProcessor") in mine_imports
    # And the adapter picks it for this release.
    argv = vllm.launch({"model": "m", "vllm_version": vllm_release.version}, "h", 1).argv
    assert argv[argv.index("--logits-processors") + 1] == vllm_forcing_v2.PROCESSOR_V2_FQCN


def test_v2_processor_forces_ids_against_the_real_interface_module(vllm_release):
    out = subprocess.run(
        [sys.executable, "-m", "tests.contracts.v2_exercise", str(vllm_release.root)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["available"] and got["subclass"] and got["abstract_left"] == []
    assert got["add"] == [True, False, True]
    assert got["row0_finite"] == [8] and got["row0_value"] == 0.0  # second forced id of slot 2
    assert got["row1_unchanged"] and got["row2_all_finite"]  # unforced; id 60 outside the row
    assert got["recycled"] is False and got["targets_after_recycle"] == [[], []]
    assert "forced_token_ids[1]" in got["validate"]
    assert "speculative" in got["speculative"]


def test_v1_processor_names_still_exist(vllm_release):
    """The CPU runner (V1) still loads the V1 processor: its base class and helper are there."""
    package = vllm_release.root / "vllm/v1/sample/logits_processor"
    names = {
        a.asname or a.name
        for n in ast.walk(parse(package / "__init__.py"))
        if isinstance(n, ast.ImportFrom)
        for a in n.names
    }
    assert "LogitsProcessor" in names
    builtin = {
        n.name for n in ast.walk(parse(package / "builtin.py")) if isinstance(n, ast.FunctionDef)
    }
    assert "process_dict_updates" in builtin
    base = method_params(package / "interface.py", "LogitsProcessor")
    mine = method_params(Path(vllm_forcing.__file__), "ForcedOutputLogitsProcessor")
    assert abstract_methods(package / "interface.py", "LogitsProcessor") <= set(mine)
    assert mine["__init__"] == base["__init__"]
    # forcing by position reads each request's output ids: the runner keeps them current for
    # any custom processor (no per-processor switch in this release's base class)
    assert set(base) == {"validate_params", "__init__", "apply", "is_argmax_invariant",
                         "update_state"}  # fmt: skip
    runner = (vllm_release.root / "vllm/v1/worker/gpu_model_runner.py").read_text()
    assert "logitsprocs_need_output_token_ids=bool(custom_logitsprocs)" in runner


def test_v2_runner_switch_and_reset_route_exist(vllm_release):
    config = (vllm_release.root / "vllm/config/vllm.py").read_text()
    assert "def use_v2_model_runner" in config and "VLLM_USE_V2_MODEL_RUNNER" in config
    # `uses_v2_runner`: no Triton (the CPU build) falls back to V1, and the env switch is read
    # as an integer (bool(int(value)): "false" would stop the server)
    assert "if not HAS_TRITON" in config
    envs = parse(vllm_release.root / "vllm/envs.py")
    (convert,) = [
        n
        for n in ast.walk(envs)
        if isinstance(n, ast.FunctionDef) and n.name == "maybe_convert_bool"
    ]
    assert "bool(int(value))" in ast.unparse(convert)
    assert (
        'maybe_convert_bool(\n        os.getenv("VLLM_USE_V2_MODEL_RUNNER"'
        in (vllm_release.root / "vllm/envs.py").read_text()
    )
    router = vllm_release.root / "vllm/entrypoints/serve/dev/cache/api_router.py"
    text = router.read_text()
    assert '"/reset_prefix_cache"' in text and '"success"' in text
    # the reset path's query parameter (FastAPI ignores an unknown one: a rename would reset only
    # the local cache) and the dev-mode gate that mounts the route
    assert "reset_external: bool = Query" in text
    assert vllm.ADAPTER.reset_path == "/reset_prefix_cache?reset_external=true"
    routers = vllm_release.root / "vllm/entrypoints/launchers/api_server/routers.py"
    assert "if envs.VLLM_SERVER_DEV_MODE:" in routers.read_text()
    assert vllm.launch({"model": "m"}, "h", 1).env.get("VLLM_SERVER_DEV_MODE") == "1"
    assert (vllm_release.root / "vllm/entrypoints/openai/api_server.py").exists()


def test_the_labels_and_values_the_mappings_read(vllm_release, lmcache_release):
    """vLLM's mapping selects series by label value (source=device|host, source=local_compute,
    transfer_type=GPU_to_CPU|CPU_to_GPU); LMCache's has one series a worker_id. A renamed value
    reads as zero, silently."""
    metrics = vllm_release.root / "vllm/v1/metrics"
    hit_source = (metrics / "cache_hit_source.py").read_text()
    assert 'DEVICE = "device"' in hit_source and 'HOST = "host"' in hit_source
    assert '"local_compute"' in (metrics / "stats.py").read_text()
    offload = (
        vllm_release.root / "vllm/distributed/kv_transfer/kv_connector/v1/offloading/metrics.py"
    ).read_text()
    assert 'LOAD = "CPU_to_GPU"' in offload and 'STORE = "GPU_to_CPU"' in offload
    assert '"worker_id"' in (lmcache_release.root / "lmcache/observability.py").read_text()
