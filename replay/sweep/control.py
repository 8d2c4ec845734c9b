"""Control-plane calls a sweep makes besides the replay: warm-up requests and a checked cache
reset. (Its signals: `replay.signals`.)"""

from __future__ import annotations

from typing import Any

import httpx

from replay.errors import EngineError
from replay.metrics.scrape import http_client

__all__ = ["warmup", "reset_and_check", "probe_cached_tokens"]

PROBE_TOKENS = 512  # spans several KV blocks at any engine's block size (16..256)


def _complete(client: httpx.Client, url: str, model: str | None, prompt: list[int], n: int) -> dict:
    body: dict[str, Any] = {
        "prompt": prompt,
        "max_tokens": n,
        "min_tokens": n,
        "ignore_eos": True,
        "temperature": 0,
    }
    if model:
        body["model"] = model
    try:
        r = client.post(url + "/v1/completions", json=body)
    except httpx.HTTPError as e:
        raise EngineError(f"{url}: control request failed: {type(e).__name__}: {e}") from None
    if r.status_code // 100 != 2:
        raise EngineError(f"{url}/v1/completions: HTTP {r.status_code}: {r.text[:300]}")
    try:
        return r.json()
    except ValueError:
        raise EngineError(f"{url}/v1/completions: response is not JSON") from None


def warmup(
    url: str,
    model: str | None,
    requests: int,
    timeout_s: float = 600.0,
    total_s: float | None = None,
) -> None:
    """Send `requests` short completions (distinct prompts) so one-time costs (compilation,
    graph capture, allocator growth) happen before the measured replay; each waits at most
    `timeout_s`, all of them at most `total_s` (EngineError past it)."""
    import time

    deadline = None if total_s is None else time.monotonic() + total_s
    with http_client(url, timeout_s) as client:
        for i in range(requests):
            if deadline is not None and time.monotonic() > deadline:
                raise EngineError(
                    f"{url}: warm-up took longer than timeouts.run_s = {total_s:g} s "
                    f"({i} of {requests} requests answered)"
                )
            _complete(client, url, model, [(7 * i + k) % 1000 + 1 for k in range(32)], 1)


def probe_cached_tokens(client: httpx.Client, url: str, model: str | None) -> int | None:
    """Send the fixed probe prompt; return the `cached_tokens` the server reports (None: none)."""
    prompt = [(k * 31) % 997 + 3 for k in range(PROBE_TOKENS)]
    usage = _complete(client, url, model, prompt, 1).get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens")
    return int(cached) if cached is not None else None


def reset_and_check(url: str, reset_path: str, model: str | None, timeout_s: float = 120.0) -> bool:
    """Empty the prefix cache and prove it: the probe is sent (so it is cached), the cache reset,
    the probe sent again, which must now report 0 cached tokens; a final reset removes the probe.
    Returns False when the server does not report cached tokens (reset done, not verifiable);
    raises EngineError when the reset fails or did not take effect."""
    with http_client(url, timeout_s) as client:

        def reset() -> None:
            try:
                r = client.post(url + reset_path)
            except httpx.HTTPError as e:
                raise EngineError(f"{url}{reset_path}: cache reset failed: {e}") from None
            if r.status_code // 100 != 2:
                raise EngineError(f"{url}{reset_path}: cache reset returned HTTP {r.status_code}")
            # vLLM answers 200 with {"success": false} while blocks are still held (e.g. by
            # in-flight offload transfers); that is a failed reset, not a done one.
            try:
                body = r.json()
            except ValueError:
                body = None  # servers that answer with an empty or plain-text body
            if isinstance(body, dict) and body.get("success") is False:
                raise EngineError(
                    f"{url}{reset_path}: cache reset refused (success: false, blocks still "
                    "held); retry once running requests and offload transfers finish"
                )

        probe_cached_tokens(client, url, model)
        reset()
        after = probe_cached_tokens(client, url, model)
        reset()
    if after is None:
        return False
    if after > 0:
        raise EngineError(
            f"{url}{reset_path}: cache reset did not take effect ({after} probe tokens still cached)"
        )
    return True
