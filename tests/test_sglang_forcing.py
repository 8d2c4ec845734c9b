"""SGLang: per-call cache details from the `sglext` chunk, and exact forcing through a per-request
custom logit processor (the shapes as SGLang 0.5.23 defines them; the contract tier checks the
definitions themselves against the release's sources)."""

from __future__ import annotations

import asyncio
import json
import pickle

import numpy as np
import orjson
import pytest

from replay.driver.http import TRANSPORTS
from replay.driver.http_common import HttpOptions
from replay.engines import sglang
from replay.engines.sglang_forcing import PARAM, ForcedOutputLogitProcessor
from replay.protocol import CompletionRequest
from tests.servers import ScriptServer


class Req:
    """The part of SGLang's scheduler request the processor reads: the ids sampled so far."""

    def __init__(self) -> None:
        self.output_ids: list[int] = []


def load_processor(serialized: str):
    """What SGLang's CustomLogitProcessor.from_str does: JSON -> hex -> unpickle -> instantiate
    (with dill where installed, whose loader is a superset of pickle's)."""
    raw = bytes.fromhex(json.loads(serialized)["callable"])
    try:
        import dill
    except ImportError:
        return pickle.loads(raw)()
    return dill.loads(raw)()


def test_request_asks_for_cache_details_and_forces_with_the_processor():
    plain = sglang.request_extras(4, None)
    assert plain == {
        "max_tokens": 4, "min_tokens": 4, "ignore_eos": True, "return_cached_tokens_details": True,
    }  # fmt: skip
    forced = sglang.request_extras(3, [7, 8, 9])
    assert forced["custom_params"] == {PARAM: [7, 8, 9]}
    assert forced["return_token_ids"] is True
    assert load_processor(forced["custom_logit_processor"]).__class__ is ForcedOutputLogitProcessor
    assert sglang.ADAPTER.forcing
    argv = sglang.launch({"model": "m"}, "127.0.0.1", 30000).argv
    assert "--enable-custom-logit-processor" in argv


def test_processor_forces_every_step_of_a_batch_as_the_sampler_calls_it():
    """Rows as SGLang's sampler passes them: logits of the rows that asked for the processor and
    their custom_params with the scheduler's `__req__`; greedy sampling must give the recorded
    ids, rows without forced ids and rows past their recording stay as they were."""
    proc = load_processor(sglang.FORCING_PROCESSOR)
    rng = np.random.default_rng(0)
    forced_a, forced_b = [5, 1, 5, 30], [2, 2]
    reqs = [Req(), Req(), Req()]
    params = [
        {PARAM: forced_a, "__req__": reqs[0]},
        {PARAM: forced_b, "__req__": reqs[1]},
        {"other": 1, "__req__": reqs[2]},
    ]
    for _step in range(4):
        logits = rng.normal(size=(3, 32)).astype(np.float32)
        before = logits.copy()
        out = proc(logits, params)
        assert out.shape == before.shape
        for row, req in enumerate(reqs):
            token = int(np.argmax(out[row]))
            if row == 0 or (row == 1 and len(req.output_ids) < len(forced_b)):
                assert np.isinf(out[row]).sum() == 31
            else:
                assert np.array_equal(out[row], before[row])
            req.output_ids.append(token)
    assert reqs[0].output_ids == forced_a
    assert reqs[1].output_ids[:2] == forced_b
    assert proc(np.zeros((1, 4)), None).shape == (1, 4)  # no params: untouched


def sglang_stream(cached: int, device: int, host: int) -> bytes:
    """An SGLang 0.5.23 streamed completion with return_cached_tokens_details: token chunks, the
    response-level sglext chunk (no choices), the usage chunk, [DONE]
    (srt/entrypoints/openai/serving_completions.py)."""
    chunks = [
        {"id": "r", "object": "text_completion", "model": "m",
         "choices": [{"index": 0, "text": "a", "token_ids": [5]}]},
        {"id": "r", "object": "text_completion", "model": "m",
         "choices": [{"index": 0, "text": "b", "token_ids": [1], "finish_reason": "length"}]},
        {"id": "r", "object": "text_completion", "model": "m", "choices": [],
         "sglext": {"cached_tokens_details": {"device": device, "host": host}}},
        {"id": "r", "object": "text_completion", "model": "m", "choices": [],
         "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11,
                   "prompt_tokens_details": {"cached_tokens": cached}}},
    ]  # fmt: skip
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


@pytest.mark.parametrize("name", sorted(TRANSPORTS))
def test_cache_details_arrive_from_the_sglext_chunk_over_loopback(name):
    bodies: list[dict] = []

    async def script(ex) -> bool:
        bodies.append(orjson.loads(ex.body))
        payload = sglang_stream(7, 5, 2)
        ex.writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(payload), payload)
        )
        return True

    forced = np.array([5, 1], dtype=np.int32)
    extras = sglang.request_extras(2, forced.tolist())
    req = CompletionRequest("t", 0, np.arange(9, dtype=np.int32), 2, forced, extras)

    async def main():
        t = TRANSPORTS[name](HttpOptions(srv.url, model="m"))
        await t.start()
        try:
            return await t.complete(req)
        finally:
            await t.close()

    with ScriptServer(script) as srv:
        res = asyncio.run(main())
    assert res.cached_tokens == 7
    assert res.cached_by_source == {"device": 5, "host": 2}
    assert res.output_ids == [5, 1]
    sent = bodies[0]
    assert sent["return_cached_tokens_details"] is True
    assert sent["custom_params"] == {PARAM: [5, 1]}
    assert sent["custom_logit_processor"] == sglang.FORCING_PROCESSOR
