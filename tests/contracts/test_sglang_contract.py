"""The SGLang adapter against the released SGLang sources (marker `contracts`).

SGLang 0.5.23 generates most server flags from dataclass fields (srt/arg_groups/fields/*.py,
`--field-name`, plus `Arg(aliases=...)`), and defines its counters in srt/observability/.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from replay.engines import sglang
from tests.contracts.release import (
    FLAG,
    arg_aliases,
    argparse_flags,
    check_flag_types,
    check_flags,
    check_metrics,
    dataclass_fields,
    py_files,
    string_constants,
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
    flags = {"--" + f.replace("_", "-"): t for f, t in dataclass_fields(fields).items()}
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
    argv = sglang.launch(options, "127.0.0.1", 30000).argv
    return string_constants([ADAPTER], FLAG) | {a for a in argv if FLAG.match(a)}


def test_every_flag_the_adapter_emits_is_defined_with_its_type(sglang_release):
    defined = sglang_flags(sglang_release.root)
    assert len(defined) > 100
    kw = {"engine": "SGLang", "checked": sglang_release.version, "pinned": sglang_release.pinned}
    problems = check_flags(emitted_flags(), defined, adapter="replay/engines/sglang.py", **kw)
    problems += check_flag_types(NUMERIC_FLAGS, defined, **kw)
    assert problems == []
    assert (sglang_release.root / "sglang/launch_server.py").exists()


def test_a_renamed_flag_fails_naming_both_versions(sglang_release):
    defined = dict(sglang_flags(sglang_release.root))
    del defined["--hicache-size"]
    problems = check_flags(
        emitted_flags(), defined, adapter="replay/engines/sglang.py", engine="SGLang",
        checked="0.6.0", pinned=sglang_release.pinned,
    )  # fmt: skip
    assert len(problems) == 1 and "--hicache-size" in problems[0]
    assert "SGLang 0.6.0" in problems[0] and f"SGLang {sglang_release.pinned}" in problems[0]


def test_every_metric_the_mapping_reads_is_defined(sglang_release):
    defined = string_constants(
        py_files(sglang_release.root, "sglang/srt"), re.compile(r"^sglang:[a-z0-9_]+$"), "sglang:"
    )
    read = string_constants([ADAPTER], re.compile(r"^sglang:[a-z0-9_]+$")) - sglang.LEGACY_METRICS
    assert "sglang:load_back_tokens_total" in read
    kw = {"engine": "SGLang", "checked": sglang_release.version, "pinned": sglang_release.pinned}
    assert check_metrics(read, defined, adapter="replay/engines/sglang.py", **kw) == []
    renamed = check_metrics(read, defined - {"sglang:cached_tokens_total"}, adapter="a", **kw)
    assert len(renamed) == 1 and "sglang:cached_tokens_total" in renamed[0]


def test_hicache_size_is_decimal_gb_per_rank(sglang_release):
    pool = (sglang_release.root / "sglang/srt/mem_cache/pool_host/base.py").read_text()
    assert "host_size * 1e9" in pool  # the unit the adapter converts GiB into
    assert sglang.hicache_size_gb(16) == 17 and sglang.hicache_size_gb(256) == 275
    # Each rank labels its own series: what the mapping's one-rank read relies on.
    collector = (sglang_release.root / "sglang/srt/observability/metrics_collector.py").read_text()
    assert '"tp_rank": parallel.tp_rank' in collector
