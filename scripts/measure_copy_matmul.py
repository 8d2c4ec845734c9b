"""Measure, on one GPU, what the simulator's `h200` preset only assumes: host<->device copy time of
KV-sized chunks and bf16 matmul throughput at the paper model's prefill shapes. About a minute.

    .venv-gpu/bin/python scripts/measure_copy_matmul.py -o results/h200-measured.json
    python scripts/measure_copy_matmul.py --small -o /tmp/shape.json   # CPU, torch only: the shape

Copies: chunks of 256 and 1,024 tokens x 24,576 bytes a token (Qwen3-Coder-30B-A3B's KV per rank
at TP 8), host to device and device to host, from pinned and from pageable host memory, one chunk
at a time (synchronised after each) and batched (8 chunks queued, one synchronisation). Per mode,
a least-squares line time = fixed + bytes / bandwidth over the chunk sizes answers whether a fixed
per-chunk cost exists (the H800 question: is moving 256-token chunks dearer per byte than 1,024?).

Matmuls: bf16 GEMMs (M tokens x K) @ (K x N) at the model's projection shapes (hidden 2,048,
32 x 128 query heads, 4 x 128 KV heads, experts of 768; from its config.json) for M = 1,024,
4,096 and 16,384 prefill tokens; TFLOP/s = 2 M K N / time. Attention itself is not measured.

On a machine without CUDA it runs the same steps on the CPU (pinned memory needs CUDA, so only
pageable copies, between two host tensors): that checks the script and its output, not a GPU.
The output JSON holds every timing, the fitted lines, the matmul rates and provenance (torch and
CUDA versions, device name, time, load average), and `preset`: the numbers a measured hardware
preset takes (`host_link_bytes_per_s`, `transfer_overhead_s`, `peak_bf16_flops_per_s` at the
largest shape).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

BYTES_PER_TOKEN = 24_576
CHUNK_TOKENS = (256, 1024)
BATCH = 8
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, EXPERT = 2048, 32, 4, 128, 768
# (name, K, N) of the prefill GEMMs of one layer of Qwen3-Coder-30B-A3B (TP 1)
SHAPES = (
    ("qkv_proj", HIDDEN, (HEADS + 2 * KV_HEADS) * HEAD_DIM),
    ("o_proj", HEADS * HEAD_DIM, HIDDEN),
    ("expert_gate_up", HIDDEN, 2 * EXPERT),
    ("expert_down", EXPERT, HIDDEN),
)
PREFILL_TOKENS = (1024, 4096, 16384)


def fit_line(bytes_: list[float], seconds: list[float]) -> dict[str, float | None]:
    """Least-squares time = fixed_s + bytes / bytes_per_s over the points (pure, no torch)."""
    n = len(bytes_)
    if n < 2 or len(set(bytes_)) < 2:
        raise ValueError("need two chunk sizes to separate a fixed cost from bandwidth")
    mx, my = sum(bytes_) / n, sum(seconds) / n
    sxx = sum((x - mx) ** 2 for x in bytes_)
    slope = sum((x - mx) * (y - my) for x, y in zip(bytes_, seconds, strict=True)) / sxx
    fixed = my - slope * mx
    # no measurable growth with size (timer noise on tiny copies): no bandwidth to state
    return {"fixed_s": fixed, "bytes_per_s": 1.0 / slope if slope > 0 else None}


def _median_s(fn: Any, sync: Any, repeats: int) -> float:
    fn()
    sync()  # warm-up: allocation and first-touch costs stay out of the timings
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(small: bool, repeats: int) -> dict[str, Any]:
    import torch

    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    bpt = 256 if small else BYTES_PER_TOKEN
    chunk_tokens = (4, 16) if small else CHUNK_TOKENS
    copies: list[dict[str, Any]] = []
    for pinned in (True, False) if cuda else (False,):
        for tokens in chunk_tokens:
            n = tokens * bpt
            host = [torch.empty(n, dtype=torch.uint8, pin_memory=pinned) for _ in range(BATCH)]
            devb = [torch.empty(n, dtype=torch.uint8, device=dev) for _ in range(BATCH)]
            for direction in ("h2d", "d2h"):
                src, dst = (host, devb) if direction == "h2d" else (devb, host)

                def one(src=src, dst=dst, nb=pinned) -> None:
                    dst[0].copy_(src[0], non_blocking=nb)

                def batched(src=src, dst=dst, nb=pinned) -> None:
                    for s, d in zip(src, dst, strict=True):
                        d.copy_(s, non_blocking=nb)

                t_one = _median_s(one, sync, repeats)
                t_batch = _median_s(batched, sync, repeats) / BATCH
                for mode, t in (("one", t_one), ("batched", t_batch)):
                    copies.append(
                        {
                            "direction": direction,
                            "pinned": pinned,
                            "mode": mode,
                            "tokens": tokens,
                            "bytes": n,
                            "seconds_per_chunk": t,
                        }
                    )
    lines: list[dict[str, Any]] = []
    for direction in ("h2d", "d2h"):
        for pinned in sorted({bool(c["pinned"]) for c in copies}):
            for mode in ("one", "batched"):
                sel = [
                    c
                    for c in copies
                    if (c["direction"], c["pinned"], c["mode"]) == (direction, pinned, mode)
                ]
                line = fit_line([c["bytes"] for c in sel], [c["seconds_per_chunk"] for c in sel])
                lines.append({"direction": direction, "pinned": pinned, "mode": mode, **line})
    dtype = torch.bfloat16
    matmuls: list[dict[str, Any]] = []
    for tokens in (16, 64) if small else PREFILL_TOKENS:
        for name, k, n in SHAPES:
            k, n = (k // 16, n // 16) if small else (k, n)
            a = torch.randn(tokens, k, dtype=dtype, device=dev)
            b = torch.randn(k, n, dtype=dtype, device=dev)
            t = _median_s(lambda a=a, b=b: a @ b, sync, repeats)
            flops = 2.0 * tokens * k * n
            matmuls.append(
                {"name": name, "m": tokens, "k": k, "n": n, "seconds": t, "flops_per_s": flops / t}
            )
    h2d = [ln for ln in lines if ln["direction"] == "h2d" and ln["mode"] == "one"]
    best = max(h2d, key=lambda ln: ln["bytes_per_s"] or 0.0)
    return {
        "provenance": {
            "device": torch.cuda.get_device_name(0) if cuda else f"cpu ({platform.machine()})",
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "small": small,
            "repeats": repeats,
            "bytes_per_token": bpt,
            "measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
            "python": sys.version.split()[0],
        },
        "copies": copies,
        "copy_lines": lines,
        "matmuls": matmuls,
        "preset": {
            "host_link_bytes_per_s": best["bytes_per_s"],
            "transfer_overhead_s": max(float(best["fixed_s"] or 0.0), 0.0),
            "peak_bf16_flops_per_s": max(m["flops_per_s"] for m in matmuls),
        },
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-o", "--out", required=True, help="JSON file to write")
    p.add_argument("--small", action="store_true", help="tiny sizes: check the script on a CPU")
    p.add_argument("--repeats", type=int, default=20, help="timings per measurement (median)")
    args = p.parse_args(argv)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("measure_copy_matmul: torch is not installed in this Python", file=sys.stderr)
        return 2
    result = measure(args.small, max(args.repeats, 1))
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
