"""Small, exactly known request workloads against a live vLLM, shared by the direct tests and by
the capture of tests/fixtures/metrics/vllm-cpu-*.txt (`python -m tests.real.vllm_workload OUT_DIR`).

Every expected number here follows from block arithmetic alone (128-token blocks; a prompt's hits
are its leading full blocks already cached, never the block holding its last token), not from
what the server answered, so the tests and the fixture README can state them up front.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

BLOCK = 128


@dataclass(frozen=True)
class Completion:
    status: int
    body: dict[str, Any]

    @property
    def ids(self) -> list[int]:
        return self.body["choices"][0]["token_ids"]

    @property
    def usage(self) -> dict[str, Any]:
        return self.body["usage"]

    @property
    def cached_tokens(self) -> int:
        return int(self.usage["prompt_tokens_details"]["cached_tokens"])


def complete(
    url: str,
    prompt: list[int],
    n: int,
    forced: list[int] | Any | None = None,
    *,
    model: str = "tiny",
    temperature: float = 0.0,
    client: httpx.Client | None = None,
) -> Completion:
    """One /v1/completions call of exactly `n` output tokens, optionally forcing `forced`."""
    from replay.engines.vllm_forcing import XARGS_KEY

    body: dict[str, Any] = {
        "model": model,
        "prompt": prompt,
        "max_tokens": n,
        "min_tokens": n,
        "ignore_eos": True,
        "temperature": temperature,
        "return_token_ids": True,
    }
    if forced is not None:
        body["vllm_xargs"] = {XARGS_KEY: forced}
    c = client or httpx.Client(timeout=300)
    try:
        r = c.post(url + "/v1/completions", json=body)
    finally:
        if client is None:
            c.close()
    return Completion(r.status_code, r.json())


def random_ids(rng: random.Random, n: int, vocab: int = 8192) -> list[int]:
    # ids 0..2 are the special tokens; keep prompts to ordinary ones
    return [rng.randrange(3, vocab) for _ in range(n)]


# The fixture workload (fresh server, nothing cached):
#   A: prompt P (1000 ids), 20 forced output ids  -> cached 0
#   B: prompt P again, 20 forced ids               -> cached 896 (P's 7 full blocks)
#   C: P + Q (2000 ids), 10 free output ids        -> cached 896 (block 8 of C differs from A's)
FIXTURE_EXPECTED = {
    "prompt_tokens": 4000,
    "output_tokens": 50,
    "device_hit_tokens": 1792,
    "computed_prefill_tokens": 4000 - 1792,
    "requests": 3,
}


def fixture_workload(url: str) -> list[Completion]:
    rng = random.Random(8)
    p = random_ids(rng, 1000)
    q = random_ids(rng, 1000)
    forced = random_ids(rng, 20)
    with httpx.Client(timeout=300) as client:
        return [
            complete(url, p, 20, forced, client=client),
            complete(url, p, 20, forced, client=client),
            complete(url, p + q, 10, client=client),
        ]


def capture(url: str, out_dir: Path) -> None:
    """Scrape /metrics, run the fixture workload, scrape again; write vllm-cpu-{before,after}.txt."""
    out_dir.mkdir(parents=True, exist_ok=True)
    before = httpx.get(url + "/metrics", timeout=30).text
    results = fixture_workload(url)
    after = httpx.get(url + "/metrics", timeout=30).text
    assert [r.cached_tokens for r in results] == [0, 896, 896], [r.usage for r in results]
    (out_dir / "vllm-cpu-before.txt").write_text(before)
    (out_dir / "vllm-cpu-after.txt").write_text(after)


def main(argv: list[str]) -> int:
    """Start a fresh server (8 MiB KV), capture the fixture pair into OUT_DIR, stop the server."""
    if len(argv) != 1:
        print("usage: python -m tests.real.vllm_workload OUT_DIR", file=sys.stderr)
        return 2
    import tempfile

    from tests.real.conftest import cpu_engine_options, ensure_tiny_model, running_vllm

    ensure_tiny_model()
    with (
        tempfile.TemporaryDirectory() as tmp,
        running_vllm(cpu_engine_options(8 << 20), Path(tmp)) as server,
    ):
        capture(server.base_url, Path(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
