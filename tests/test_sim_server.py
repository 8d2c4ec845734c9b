"""`replay sim serve` as a real subprocess on a loopback port: OpenAI shapes, streaming, errors,
metrics, cache reset."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import orjson
import pytest

from replay.sim.options import SimConfig
from replay.sim.server import warm_up


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    ready = tmp_path_factory.mktemp("sim") / "port"
    argv = [
        sys.executable,
        "-m",
        "replay.cli.main",
        "sim",
        "serve",
        "--port",
        "0",
        "--ready-file",
        str(ready),
        "--device-kv-gib",
        "0.5",
        "--host-tier-gib",
        "0.5",
        "--chunk-tokens",
        "64",
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not (ready.exists() and ready.read_text().strip()):
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            assert time.monotonic() < deadline, "server did not write its ready file"
            time.sleep(0.05)
        port = int(ready.read_text())
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            yield client
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        assert proc.returncode == 0, f"server exited with {proc.returncode}"
        assert not ready.exists()  # the port file goes with the server


@contextlib.asynccontextmanager
async def _serving(app, make_runner=None):
    """`app` served on a free loopback port (its number yielded) until the block ends."""
    from aiohttp import web

    runner = (make_runner or web.AppRunner)(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


def complete(client: httpx.Client, **body) -> dict:
    r = client.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_token_prompt_gets_usage_and_a_second_call_hits_the_cache(server):
    prompt = list(range(1, 401))
    out = list(range(1000, 1008))
    a = complete(
        server,
        prompt=prompt,
        max_tokens=8,
        min_tokens=8,
        ignore_eos=True,
        user="s1",
        forced_output_ids=out,
        return_token_ids=True,
    )
    assert a["object"] == "text_completion"
    assert a["choices"][0]["finish_reason"] == "length"
    assert a["choices"][0]["token_ids"] == out
    assert a["usage"]["prompt_tokens"] == 400 and a["usage"]["completion_tokens"] == 8
    assert a["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    b = complete(server, prompt=prompt + out + [7] * 30, max_tokens=2, user="s1")
    details = b["usage"]["prompt_tokens_details"]
    assert details["cached_tokens"] == 400  # 407 tokens of KV -> 25 full blocks
    assert details["device"] == 400 and details["host"] == 0


def test_text_prompt_tokenizes_as_bytes(server):
    r = complete(server, prompt="hello, simulator", max_tokens=3)
    assert r["usage"]["prompt_tokens"] == len(b"hello, simulator")
    assert len(r["choices"][0]["text"]) == 3


def test_streaming_sends_first_token_then_usage_then_done(server):
    body = {
        "prompt": list(range(50)),
        "max_tokens": 5,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with server.stream("POST", "/v1/completions", json=body) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [line.removeprefix("data: ") for line in r.iter_lines() if line]
    assert events[-1] == "[DONE]"
    objs = [orjson.loads(e) for e in events[:-1]]
    assert len(objs[0]["choices"][0]["text"]) == 1
    assert (
        "".join(o["choices"][0]["text"] for o in objs if o["choices"])
        and len("".join(o["choices"][0]["text"] for o in objs if o["choices"])) == 5
    )
    assert objs[-1]["choices"] == [] and objs[-1]["usage"]["completion_tokens"] == 5


@pytest.mark.parametrize(
    "body, param",
    [
        (b"not json", None),
        (b"[1, 2]", None),
        (orjson.dumps({"max_tokens": 3}), "prompt"),
        (orjson.dumps({"prompt": [1, -5]}), "prompt"),
        (orjson.dumps({"prompt": [1, 2], "max_tokens": "many"}), "max_tokens"),
        (orjson.dumps({"prompt": [1, 2], "max_tokens": 2, "min_tokens": 3}), "min_tokens"),
        (orjson.dumps({"prompt": [[1], [2]]}), "prompt"),
        (orjson.dumps({"prompt": list(range(30000)), "max_tokens": 1}), "prompt"),
        (
            orjson.dumps({"prompt": [1], "max_tokens": 2, "forced_output_ids": [1]}),
            "forced_output_ids",
        ),
    ],
)
def test_bad_requests_get_openai_errors_and_the_server_survives(server, body, param):
    r = server.post("/v1/completions", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "BadRequestError" and err["message"] and err["param"] == param
    assert server.get("/health").status_code == 200


def test_models_health_metrics_and_reset(server):
    models = server.get("/v1/models").json()
    assert models["data"][0]["id"] == "qwen3-coder-30b-a3b"
    complete(server, prompt=list(range(5000, 5300)), max_tokens=1, user="m")
    text = server.get("/metrics").text
    values = {
        line.split()[0]: float(line.split()[1])
        for line in text.splitlines()
        if line.startswith("replay_sim:")
    }
    for name in (
        "prompt_tokens",
        "output_tokens",
        "device_hit_tokens",
        "host_restore_tokens",
        "computed_prefill_tokens",
        "host_write_tokens",
        "host_evicted_tokens",
        "preemptions",
    ):
        assert f"replay_sim:{name}_total" in values
    assert values["replay_sim:prompt_tokens_total"] >= 300
    assert values["replay_sim:host_write_tokens_total"] >= 256  # the 300-token prompt's chunks
    assert server.post("/reset_prefix_cache").status_code == 200
    again = complete(server, prompt=list(range(5000, 5300)), max_tokens=1, user="m")
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


def test_cli_reports_bad_options_without_traceback(tmp_path: Path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "replay.cli.main",
            "sim",
            "serve",
            "--port",
            "0",
            "--hardware",
            "tpu-v9",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )
    assert r.returncode == 2
    assert "unknown hardware 'tpu-v9'" in r.stderr and "h100" in r.stderr
    assert "Traceback" not in r.stderr


def test_time_scale_paces_answers_in_wall_time():
    import asyncio

    from replay.sim.options import SimConfig
    from replay.sim.server import build_app

    # llama-3-8b on an H100 at efficiency 1: a 4096-token prefill takes 66 ms simulated
    cfg = SimConfig(
        hardware="h100",
        model="llama-3-8b",
        tp=1,
        device_kv_gib=2,
        efficiency=1.0,
        attention_flops=False,
    )

    async def latency(scale: float) -> float:
        async with (
            _serving(build_app(SimConfig(**{**cfg.to_dict(), "time_scale": scale}))) as port,
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as c,
        ):
            t0 = time.monotonic()
            r = await c.post("/v1/completions", json={"prompt": list(range(4096)), "max_tokens": 1})
            assert r.status_code == 200
            return time.monotonic() - t0

    sim_s = 2 * 8.0e9 * 4096 / 989.5e12
    warm_up(cfg)  # the kernels' first load (~0.5 s on a loaded machine) is no part of either
    fast = asyncio.run(latency(0.0))  # answers as fast as it computes
    slow = asyncio.run(latency(10.0))  # ten wall seconds per simulated second
    assert slow >= 10 * sim_s * 0.95
    assert fast < slow


def test_a_stream_sends_each_decode_step_token_at_that_steps_end():
    """Each token comes in its own chunk when its decode step ends on the server's clock (as an
    engine streams), never before it: TT2T is one step after the first token, not the whole
    request (the rest used to come in one chunk at the end)."""
    import asyncio

    from replay.sim.engine import SimEngine
    from replay.sim.server import build_app

    scale = 5.0  # wall s per simulated s: an 8B decode step is ~5 ms simulated, ~25 ms wall
    cfg = SimConfig(hardware="h100", model="llama-3-8b", tp=1, device_kv_gib=2, time_scale=scale)
    n, prompt = 8, 2048
    step_s = float(SimEngine(cfg).cost.decode_cum_s(1, prompt, n)[0])  # the shortest: the first
    forced = list(range(500, 500 + n))

    async def chunks() -> list[tuple[float, list[int], str | None]]:
        body = {
            "prompt": list(range(prompt)),
            "max_tokens": n,
            "stream": True,
            "forced_output_ids": forced,
            "return_token_ids": True,
        }
        got = []
        async with (
            _serving(build_app(cfg)) as port,
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as c,
            c.stream("POST", "/v1/completions", json=body) as r,
        ):
            async for line in r.aiter_lines():
                if line.startswith("data: {"):
                    choice = orjson.loads(line.removeprefix("data: "))["choices"][0]
                    got.append((time.monotonic(), choice["token_ids"], choice["finish_reason"]))
        return got

    warm_up(cfg)
    got = asyncio.run(chunks())
    assert [t for _, ids, _ in got for t in ids] == forced
    assert [f for *_, f in got] == [None] * (len(got) - 1) + ["length"]
    assert len(got[0][1]) == 1 and len(got) >= 3  # the first token alone, the rest not at once
    t_first, tokens = got[0][0], 1
    for t, ids, _ in got[1:]:
        tokens += len(ids)
        # token k's step ends (k - 1) decode steps after the first token: never sooner
        assert t - t_first >= 0.9 * (tokens - 1) * step_s * scale, (tokens, t - t_first)


def test_a_client_that_goes_away_mid_stream_is_not_an_error(caplog):
    """A cancelled call (or a client's Ctrl-C) closes its connection mid-stream: the server
    goes on quietly (it logged a traceback per call: thousands of lines after a pool's Ctrl-C)."""
    import asyncio
    import logging

    from replay.sim.options import SimConfig
    from replay.sim.server import build_app

    cfg = SimConfig(hardware="h100", model="llama-3-8b", tp=1, device_kv_gib=2, time_scale=5.0)

    async def main() -> None:
        async with _serving(build_app(cfg)) as port:
            body = {"prompt": list(range(2048)), "max_tokens": 40, "stream": True}
            async with (
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as c,
                c.stream("POST", "/v1/completions", json=body) as r,
            ):
                async for _ in r.aiter_bytes():
                    break  # the first token came: go away
            await asyncio.sleep(2.0)  # the rest of the stream is due meanwhile (~1.6 s)

    with caplog.at_level(logging.ERROR, logger="aiohttp"):
        asyncio.run(main())
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


_WARM_CHECK = """
import numba, sys
from replay.sim import device_kernel, host_kernel, keying_kernel
from replay.sim.options import SimConfig
from replay.sim.server import warm_up
mods = (device_kernel, host_kernel, keying_kernel)
def compiled():
    return sorted(
        f"{m.__name__.rsplit('.', 1)[1]}.{n}" for m in mods for n, f in vars(m).items()
        if isinstance(f, numba.core.registry.CPUDispatcher) and f.signatures
    )
assert compiled() == [], compiled()
warm_up(SimConfig(host_tier_gib=5))
print(",".join(compiled()))
"""


def test_warm_up_loads_the_kernels_before_the_server_says_ready():
    """The engine's compiled kernels load (or compile) in `warm_up`, before the ready line: in
    the first calls' latency they made the first pool's TTFT 6.35 s against 24 ms after."""
    cp = subprocess.run(
        [sys.executable, "-c", _WARM_CHECK], capture_output=True, text=True, timeout=300
    )
    assert cp.returncode == 0, cp.stderr
    done = set(cp.stdout.strip().split(","))
    assert {"keying_kernel.key_blocks", "device_kernel.match", "host_kernel.lookup"} <= done


@pytest.mark.parametrize(
    ("config", "warmed"),
    [
        (SimConfig(personality="llamacpp", max_num_seqs=2, device_kv_gib=0.01, model="tiny-gguf"),
         True),
        (SimConfig(device_kv_gib=0.001, max_model_len=64), False),  # holds less than the calls
    ],
)  # fmt: skip
def test_warm_up_takes_slot_configurations_and_survives_tiny_ones(config, warmed):
    assert warm_up(config) is warmed


def _running_and_time(c: httpx.Client) -> tuple[float, float]:
    text = c.get("/metrics").text
    got = {}
    for line in text.splitlines():
        for name in ("num_requests_running", "sim_time_seconds"):
            if line.startswith(f"replay_sim:{name} "):
                got[name] = float(line.split()[1])
    return got["num_requests_running"], got["sim_time_seconds"]


def test_a_client_that_goes_away_frees_the_engine_of_its_request():
    """A dropped stream's request decoded on to its end: 20 dropped streams made a 100-token
    call ten times slower, and their tokens were counted as served."""
    import asyncio
    import threading

    from aiohttp import web

    from replay.sim.options import SimConfig
    from replay.sim.server import app_runner, build_app

    cfg = SimConfig(hardware="h100", model="llama-3-8b", tp=1, device_kv_gib=2, time_scale=1.0)
    started = threading.Event()
    holder: dict = {}

    async def serve() -> None:
        runner = app_runner(build_app(cfg))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        holder["port"] = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        holder["stop"] = asyncio.Event()
        started.set()
        try:
            await holder["stop"].wait()
        finally:
            await runner.cleanup()

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),))
    thread.start()
    try:
        assert started.wait(30)
        base = f"http://127.0.0.1:{holder['port']}"
        body = {"prompt": list(range(2048)), "max_tokens": 20000, "stream": True}
        with httpx.Client(base_url=base, timeout=30) as c:
            with c.stream("POST", "/v1/completions", json=body) as r:
                for _ in r.iter_bytes():
                    break  # the first token came: go away (about 200 s of decode left)
            deadline = time.monotonic() + 5
            while _running_and_time(c)[0] and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _running_and_time(c)[0] == 0
            out = c.get("/metrics").text
            made = [x for x in out.splitlines() if x.startswith("replay_sim:output_tokens_total ")]
            assert made and float(made[0].split()[1]) < 20000  # what was made, not what was asked
    finally:
        loop.call_soon_threadsafe(holder["stop"].set)
        thread.join(30)


def test_an_idle_server_as_fast_as_possible_keeps_its_ttl_pins():
    """At time_scale 0 the clock jumped to the next timer whenever the server went idle: every
    TTL pin expired the moment a call ended. Idle time now takes no simulated time."""
    import asyncio

    from replay.sim.options import SimConfig
    from replay.sim.server import app_runner, build_app

    cfg = SimConfig(hardware="h100", model="llama-3-8b", tp=1, device_kv_gib=2, admission="ttl",
                    ttl_s=30.0)  # fmt: skip

    async def main() -> tuple[float, float]:
        async with (
            _serving(build_app(cfg), app_runner) as port,
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as c,
        ):
            body = {"prompt": list(range(1024)), "max_tokens": 4}
            assert (await c.post("/v1/completions", json=body)).status_code == 200
            await asyncio.sleep(0.3)  # idle
            text = (await c.get("/metrics")).text
            t_idle = next(
                float(x.split()[1]) for x in text.splitlines()
                if x.startswith("replay_sim:sim_time_seconds ")
            )  # fmt: skip
            again = await c.post("/v1/completions", json=body)
            hit = again.json()["usage"]["prompt_tokens_details"]["device"]
            return t_idle, hit

    t_idle, hit = asyncio.run(main())
    assert t_idle < 1.0  # was 30.0: the pin's expiry
    assert hit == 1024 - 16  # the pinned prompt is still there (its last block is recomputed)


@pytest.mark.parametrize(
    "extra, status",
    [
        ({"max_tokens": None}, 200),  # vLLM's default (16), not a 500
        ({"stream": "false"}, 400),  # was read as true
        ({"return_token_ids": 1}, 400),
    ],
)
def test_request_fields_read_as_vllm_reads_them(server, extra, status):
    r = server.post("/v1/completions", json={"prompt": [1, 2, 3], **extra})
    assert r.status_code == status, r.text
    if status == 200:
        assert r.json()["usage"]["completion_tokens"] == 16


@pytest.mark.parametrize(
    "extra, status, param, words",
    [
        # vLLM 0.33's answers, word for word (sources cited in docs/simulator.md)
        ({"max_tokens": 0}, 400, "max_tokens", "max_tokens must be at least 1, got 0."),
        ({"max_tokens": -2}, 400, "max_tokens", "max_tokens must be at least 1, got -2."),
        (
            {"stream_options": {"include_usage": True}},
            400,
            "stream_options",
            "Stream options can only be defined when `stream=True`.",
        ),
        (
            {"model": "gpt-4"},
            404,
            "model",
            "The model `gpt-4` does not exist. Valid aliases: qwen3-coder-30b-a3b.",
        ),  # fmt: skip
    ],
)
def test_requests_vllm_refuses_are_refused_in_its_words(server, extra, status, param, words):
    r = server.post("/v1/completions", json={"prompt": [1, 2, 3], **extra})
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert (err["message"], err["param"], err["code"]) == (words, param, status)


@pytest.mark.parametrize("model", [None, "", "qwen3-coder-30b-a3b"])
def test_the_served_model_or_none_is_answered_under_the_served_name(server, model):
    r = server.post("/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 1, "model": model})
    assert r.status_code == 200, r.text
    assert r.json()["model"] == "qwen3-coder-30b-a3b"


def test_served_model_name_is_the_name_answered_and_listed():
    import asyncio

    from replay.sim.server import build_app

    async def main():
        app = build_app(SimConfig(device_kv_gib=0.5), served_model_name="coder")
        async with (
            _serving(app) as port,
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as c,
        ):
            listed = (await c.get("/v1/models")).json()["data"][0]["id"]
            body = {"prompt": [1, 2], "max_tokens": 1}
            named = await c.post("/v1/completions", json={**body, "model": "coder"})
            preset = await c.post("/v1/completions", json={**body, "model": "qwen3-coder-30b-a3b"})
            return listed, named.status_code, named.json()["model"], preset.status_code

    assert asyncio.run(main()) == ("coder", 200, "coder", 404)


def test_a_given_vocabulary_refuses_ids_past_it_as_vllm_does():
    """A trace tokenized for another model sent ids past the served model's vocabulary: vLLM
    answers 400 'Token id N is out of vocabulary'; the simulator server took them. Without
    --vocab-size it still takes any id (its presets carry no vocabulary)."""
    import asyncio

    from replay.sim.server import build_app

    async def post(vocab_size, prompt):
        app = build_app(SimConfig(device_kv_gib=0.5), vocab_size=vocab_size)
        async with (
            _serving(app) as port,
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as c,
        ):
            r = await c.post("/v1/completions", json={"prompt": prompt, "max_tokens": 1})
            return r.status_code, r.json()

    code, body = asyncio.run(post(1000, [5, 1000, 7]))
    assert code == 400 and body["error"]["message"] == "Token id 1000 is out of vocabulary"
    assert body["error"]["param"] == "prompt"
    assert asyncio.run(post(1000, [5, 999, 7]))[0] == 200
    assert asyncio.run(post(None, [5, 10**6]))[0] == 200


def test_sighup_stops_the_server_as_sigterm_does(tmp_path):
    # a closed terminal killed it with its ready file left, naming a dead port
    ready = tmp_path / "port"
    argv = [sys.executable, "-m", "replay.cli.main", "sim", "serve", "--port", "0",
            "--ready-file", str(ready), "--device-kv-gib", "0.5"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not (ready.exists() and ready.read_text().strip()):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGHUP)
        assert proc.wait(20) == 0
        assert not ready.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
