"""The simulator server refuses requests larger than its simulated device before allocating them:
a 43-byte body asking for 3e8 output tokens gets a JSON 400 at once, and /health stays quick."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiohttp.test_utils import TestClient, TestServer

from replay.sim.options import SimConfig
from replay.sim.server import build_app


async def _ask(bodies: list[dict]) -> list[tuple[int, dict, float]]:
    app = build_app(SimConfig.from_options(device_kv_gib=0.5))
    async with TestClient(TestServer(app, host="127.0.0.1", port=0)) as client:
        out = []
        for body in bodies:
            t0 = time.monotonic()
            r = await client.post("/v1/completions", json=body)
            out.append((r.status, await r.json(), time.monotonic() - t0))
            health = await client.get("/health")
            assert health.status == 200
        ok = await client.post("/v1/completions", json={"prompt": [1, 2], "max_tokens": 3})
        assert ok.status == 200, await ok.text()
        return out


@pytest.mark.parametrize("max_tokens", [300_000_000, 10**12, 2**63 - 1])
def test_oversized_max_tokens_is_a_quick_json_400(max_tokens):
    ((status, body, took_s),) = asyncio.run(_ask([{"prompt": [1, 2], "max_tokens": max_tokens}]))
    assert status == 400
    err = body["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == "max_tokens"
    assert f"max_tokens ({max_tokens})" in err["message"] and "--device-kv-gib" in err["message"]
    # allocating the stand-in output ids took 23 s and 7 GB for 3e8 tokens
    assert took_s < 2.0


def test_refused_request_still_counts_as_a_call_of_its_user():
    # The next request of the user is the trace's next call, whose stand-in output differs.
    async def go() -> tuple[list, list]:
        app = build_app(SimConfig.from_options(device_kv_gib=0.5))
        async with TestClient(TestServer(app, host="127.0.0.1", port=0)) as client:
            body = {"prompt": [1, 2], "max_tokens": 4, "user": "u", "return_token_ids": True}
            first = await (await client.post("/v1/completions", json=body)).json()
            await client.post("/v1/completions", json=dict(body, max_tokens=10**12))
            third = await (await client.post("/v1/completions", json=body)).json()
            return first["choices"][0]["token_ids"], third["choices"][0]["token_ids"]

    first, third = asyncio.run(go())
    assert first != third


def test_unknown_route_and_wrong_method_are_json_errors():
    async def go() -> list[tuple[int, str, dict]]:
        app = build_app(SimConfig.from_options(device_kv_gib=0.5))
        async with TestClient(TestServer(app, host="127.0.0.1", port=0)) as client:
            out = []
            for r in (await client.get("/nope"), await client.get("/v1/completions")):
                out.append((r.status, r.headers["Content-Type"], await r.json()))
            return out

    for status, ctype, body in asyncio.run(go()):
        assert status in (404, 405) and ctype.startswith("application/json")
        assert body["error"]["code"] == status and body["error"]["message"]
