"""The simulator server refuses requests larger than its simulated device before allocating them:
a 43-byte body asking for 3e8 output tokens gets a JSON 400 at once, and /health stays quick."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiohttp.test_utils import TestClient, TestServer

from replay.sim.options import SimConfig
from replay.sim.server import build_app


async def _ask(bodies: list[dict], **options) -> list[tuple[int, dict, float]]:
    app = build_app(SimConfig.from_options(device_kv_gib=0.5, **options))
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


@pytest.mark.parametrize("max_tokens", [500_000, 300_000_000, 10**12, 2**63 - 1])
def test_oversized_max_tokens_is_a_quick_json_400(max_tokens):
    ((status, body, took_s),) = asyncio.run(_ask([{"prompt": [1, 2], "max_tokens": max_tokens}]))
    assert status == 400
    err = body["error"]
    assert err["type"] == "BadRequestError" and err["param"] == "max_tokens"
    if max_tokens > 1 << 20:  # past the model's length alone: vLLM's words
        assert err["message"] == (
            f"max_tokens={max_tokens} cannot be greater than max_model_len=1048576. "
            "Please request fewer output tokens."
        )
    else:  # within the model, past the simulated device: the simulator's own limit
        assert (
            f"max_tokens ({max_tokens})" in err["message"] and "--device-kv-gib" in err["message"]
        )
    # allocating the stand-in output ids took 23 s and 7 GB for 3e8 tokens
    assert took_s < 2.0


def test_the_model_length_cuts_the_output_as_vllm_serves_it():
    # vLLM caps max_tokens at what --max-model-len leaves (get_max_tokens) and refuses a prompt
    # or a max_tokens past it alone; the simulator refused every sum past it
    forced = list(range(200))
    bodies = [
        {"prompt": [1] * 4000, "max_tokens": 200, "return_token_ids": True},
        {"prompt": [1] * 4000, "max_tokens": 200, "forced_output_ids": forced,
         "return_token_ids": True},
        {"prompt": [1] * 4097, "max_tokens": 1},
        {"prompt": [1] * 4096, "max_tokens": 1},
        {"prompt": [1, 2], "max_tokens": 5000},
    ]  # fmt: skip
    cut, forced_cut, long_prompt, full, long_output = asyncio.run(_ask(bodies, max_model_len=4096))
    for status, body, _ in (cut, forced_cut):
        assert status == 200, body
        choice = body["choices"][0]
        assert body["usage"]["completion_tokens"] == 96 and choice["finish_reason"] == "length"
    assert forced_cut[1]["choices"][0]["token_ids"] == forced[:96]
    assert long_prompt[:2] == (400, long_prompt[1]) and long_prompt[1]["error"]["message"] == (
        "This model's maximum context length is 4096 tokens. However, your prompt contains 4097 "
        "input tokens, which exceeds this limit even without any output tokens. Please reduce the "
        "length of the input prompt."
    )
    assert full[0] == 400 and full[1]["error"]["message"] == "max_tokens must be at least 1, got 0."
    assert (
        long_output[0] == 400
        and "cannot be greater than max_model_len=4096" in (long_output[1]["error"]["message"])
    )


def test_a_body_not_sent_as_json_is_refused_as_vllm_refuses_it():
    async def go() -> tuple[int, dict]:
        app = build_app(SimConfig.from_options(device_kv_gib=0.5))
        async with TestClient(TestServer(app, host="127.0.0.1", port=0)) as client:
            r = await client.post(
                "/v1/completions",
                data=b'{"prompt": [1, 2]}',
                headers={"Content-Type": "text/plain"},
            )
            return r.status, await r.json()

    status, body = asyncio.run(go())
    assert status == 400
    assert body["error"]["message"] == "Unsupported Media Type: Only 'application/json' is allowed"


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
