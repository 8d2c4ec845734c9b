"""Control-plane calls to an OpenAI-compatible server (synchronous): served model, health.

These run before a replay starts, outside the measured loop, so a plain blocking GET is right
(`replay.metrics.plain_get`, the standard library's client: a run does not load httpx for them).
"""

from __future__ import annotations

import orjson

from replay.driver.http_common import HttpOptions
from replay.metrics.plain_get import GetError, get_once

__all__ = ["served_model", "first_model_id", "is_healthy"]


def served_model(base_url: str, timeout_s: float = 5.0) -> str | None:
    """The first model id of GET /v1/models, or None when the server does not answer it."""
    root = HttpOptions(base_url).root
    try:
        status, body = get_once(root + "/v1/models", timeout_s)
    except GetError:
        return None
    return first_model_id(status, body)


def first_model_id(status: int, body: bytes) -> str | None:
    """The first model id of a /v1/models answer (None: not a 200 with one)."""
    if status != 200:
        return None
    try:
        data = orjson.loads(body).get("data") or []
        return str(data[0]["id"]) if data and isinstance(data[0], dict) else None
    except (ValueError, KeyError, AttributeError):
        return None


def is_healthy(base_url: str, path: str = "/health", timeout_s: float = 5.0) -> bool:
    """Whether GET `path` answers 2xx."""
    try:
        return get_once(HttpOptions(base_url).root + path, timeout_s)[0] // 100 == 2
    except GetError:
        return False
