"""Run every benchmark (or those named on the command line) and print their side-by-side ratios."""

from __future__ import annotations

import importlib
import sys

import orjson

from benchmarks.common import BENCH_JSON, merge_results

# Explicit list; each module has `run() -> dict`.
MODULES = ["bench_trace", "bench_model", "bench_sim", "bench_driver", "bench_sweep_ray"]


def main(argv: list[str]) -> int:
    names = argv or MODULES
    for name in names:
        try:
            mod = importlib.import_module(f"benchmarks.{name}")
        except ModuleNotFoundError:
            print(f"[{name}] not present, skipped")
            continue
        print(f"[{name}] running", flush=True)
        values = mod.run()
        merge_results(name.removeprefix("bench_"), values)
        print(
            orjson.dumps(values, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode()
        )
    print(f"written: {BENCH_JSON}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
