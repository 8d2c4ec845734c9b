"""Stack-distance pass on a paper-scale swe-agent stream: numba kernel vs a plain-Python Fenwick pass.

Both passes compute the same distances over the same integer key stream (checked equal here), in
REPEATS interleaved repetitions: each ratio is median [min-max] of the per-repetition ratios, with
the load average after each repetition. Ours is also timed end to end, keys included (trace ->
prefix-chained chunk ids -> distances), since turning prompts into keys can cost more than the
kernel. Also times a full `predict_tiers` (six
host tiers plus the device tier at 16-token blocks), which the sweep runs before every experiment.
"""

from __future__ import annotations

import time

import numpy as np

from benchmarks.common import load_avg_1m, spread
from replay.model.predict import predict_tiers
from replay.model.presets import MODELS
from replay.model.stackdist import stack_distances, stack_distances_plain
from replay.model.streams import build_stream, key_trace
from replay.trace.synth import synth

CHUNKS = (1024, 64)
REPEATS = 3


def _timed(fn) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


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
        "repeats": REPEATS,
        "load_avg_1m_start": load_avg_1m(),
    }

    def end_to_end(c: int):
        keyed = key_trace(trace, c)
        stream = build_stream(keyed.host_keys, order)
        return stream, stack_distances(stream.keys, stream.offsets)

    for c in CHUNKS:
        keyed = key_trace(trace, c)
        stream = build_stream(keyed.host_keys, order)
        keys_list, offsets_list = stream.keys.tolist(), stream.offsets.tolist()
        t: dict[str, list[float]] = {"keys": [], "pass": [], "e2e": [], "plain": []}
        loads = []
        for _ in range(REPEATS):  # interleaved: a burst of other load hits both sides alike
            t["keys"].append(_timed(lambda c=c: key_trace(trace, c))[0])
            pass_s, ours = _timed(lambda s=stream: stack_distances(s.keys, s.offsets))
            t["pass"].append(pass_s)
            t["e2e"].append(_timed(lambda c=c: end_to_end(c))[0])
            plain_s, plain = _timed(lambda k=keys_list, o=offsets_list: stack_distances_plain(k, o))
            t["plain"].append(plain_s)
            if ours.tolist() != plain:
                raise AssertionError(f"numba and plain passes disagree at {c}-token chunks")
            loads.append(load_avg_1m())
        e2e = spread(t["e2e"], 6)
        ratio = spread([p / o for p, o in zip(t["plain"], t["pass"], strict=True)], 1)
        e2e_ratio = spread([p / e for p, e in zip(t["plain"], t["e2e"], strict=True)], 1)
        values[f"chunk_{c}"] = {
            "references": len(stream.keys),
            "distinct_chunks": int(stream.keys.max()) + 1 if len(stream.keys) else 0,
            **{f"{k}_s": spread(v, 6)["median"] for k, v in t.items() if k != "e2e"},
            "end_to_end_s": e2e["median"],
            "end_to_end_s_spread": spread(t["e2e"], 3)["text"],
            "end_to_end_s_median_exact": e2e["median_exact"],
            "speedup_vs_plain": ratio["median"],
            "speedup_vs_plain_spread": ratio["text"],
            "speedup_vs_plain_median_exact": ratio["median_exact"],
            "end_to_end_speedup_vs_plain_pass": e2e_ratio["median"],
            "load_avg_1m_per_repeat": loads,
        }
    small = values[f"chunk_{min(CHUNKS)}"]
    values["stackdist_speedup_vs_plain"] = small["speedup_vs_plain"]
    values["stackdist_speedup_vs_plain_spread"] = small["speedup_vs_plain_spread"]
    values["stackdist_64_end_to_end_s"] = small["end_to_end_s"]
    values["goals"] = {  # unrounded medians
        "stackdist_speedup_vs_plain_ge_30": small["speedup_vs_plain_median_exact"] >= 30,
        "end_to_end_64_under_1s": small["end_to_end_s_median_exact"] < 1.0,
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
