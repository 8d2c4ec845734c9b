"""Stack-distance pass on a paper-scale swe-agent stream: numba kernel vs a plain-Python Fenwick pass.

Both passes compute the same distances over the same integer key stream (checked equal here); ours
is also timed end to end, keys included (trace -> prefix-chained chunk ids -> distances), since
turning prompts into keys can cost more than the kernel. Also times a full `predict_tiers` (six
host tiers plus the device tier at 16-token blocks), which the sweep runs before every experiment.
"""

from __future__ import annotations

import time

import numpy as np

from replay.model.predict import predict_tiers
from replay.model.presets import MODELS
from replay.model.stackdist import stack_distances, stack_distances_plain
from replay.model.streams import build_stream, key_trace
from replay.trace.synth import synth

CHUNKS = (1024, 64)
REPEATS = 3


def _best(fn, repeats: int = REPEATS) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def run() -> dict:
    trace = synth("swe-agent", seed=0)
    stack_distances(
        np.array([0, 1, 0], np.int64)
    )  # compile (or load the cache) outside the timings
    order = np.arange(len(trace.calls))
    values: dict = {
        "trace": "synth swe-agent seed 0",
        "calls": len(trace.calls),
        "prompt_tokens": trace.prompt_tokens,
    }

    def end_to_end(c: int):
        keyed = key_trace(trace, c)
        stream = build_stream(keyed.host_keys, order)
        return stream, stack_distances(stream.keys, stream.offsets)

    for c in CHUNKS:
        keys_s, keyed = _best(lambda c=c: key_trace(trace, c))
        stream = build_stream(keyed.host_keys, order)
        pass_s, ours = _best(lambda s=stream: stack_distances(s.keys, s.offsets))
        e2e_s, _ = _best(lambda c=c: end_to_end(c))
        keys_list, offsets_list = stream.keys.tolist(), stream.offsets.tolist()
        t = time.perf_counter()
        plain = stack_distances_plain(keys_list, offsets_list)
        plain_s = time.perf_counter() - t
        if ours.tolist() != plain:
            raise AssertionError(f"numba and plain passes disagree at {c}-token chunks")
        values[f"chunk_{c}"] = {
            "references": len(stream.keys),
            "distinct_chunks": int(stream.keys.max()) + 1 if len(stream.keys) else 0,
            "keys_s": keys_s,
            "pass_s": pass_s,
            "end_to_end_s": e2e_s,
            "plain_pass_s": plain_s,
            "speedup_vs_plain": plain_s / pass_s,
            "end_to_end_speedup_vs_plain_pass": plain_s / e2e_s,
        }
    small = values[f"chunk_{min(CHUNKS)}"]
    values["stackdist_speedup_vs_plain"] = small["speedup_vs_plain"]
    values["stackdist_64_end_to_end_s"] = small["end_to_end_s"]
    values["goals"] = {
        "stackdist_speedup_vs_plain_ge_30": small["speedup_vs_plain"] >= 30,
        "end_to_end_64_under_1s": small["end_to_end_s"] < 1.0,
    }

    bpt = MODELS["qwen3-coder-30b-a3b"].bytes_per_token(8)
    t = time.perf_counter()
    predict_tiers(
        trace,
        pool=16,
        bytes_per_token=bpt,
        chunk_tokens=256,
        device_tokens=1_000_000,
        tiers_gib=[0, 5, 10, 20, 40, 80],
        order="pool",
        offload_pays=False,
    )
    values["predict_tiers_6_tiers_with_device_s"] = time.perf_counter() - t
    return values
