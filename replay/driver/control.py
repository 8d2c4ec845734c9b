"""Control-plane calls to an OpenAI-compatible server (httpx, synchronous): served model, health.

These run before a replay starts, outside the measured loop, so a plain blocking client is right.
"""

from __future__ import annotations

import httpx

from replay.driver.http_common import HttpOptions

__all__ = ["served_model", "is_healthy"]


def served_model(base_url: str, timeout_s: float = 5.0) -> str | None:
    """The first model id of GET /v1/models, or None when the server does not answer it."""
    root = HttpOptions(base_url).root
    try:
        resp = httpx.get(root + "/v1/models", timeout=timeout_s)
        if resp.status_code != 200:
            return None
        data = resp.json().get("data") or []
        return str(data[0]["id"]) if data and isinstance(data[0], dict) else None
    except (httpx.HTTPError, ValueError, KeyError, AttributeError):
        return None


def is_healthy(base_url: str, path: str = "/health", timeout_s: float = 5.0) -> bool:
    """Whether GET `path` answers 2xx."""
    try:
        return httpx.get(HttpOptions(base_url).root + path, timeout=timeout_s).is_success
    except httpx.HTTPError:
        return False
