"""OpenAI-compatible HTTP front of the simulator (aiohttp): `replay sim serve`.

Endpoints: POST /v1/completions (token-id or text prompt, streaming with usage), GET /v1/models,
GET /health, GET /version, GET /metrics (Prometheus text, `replay_sim:` prefix), POST
/reset_prefix_cache.
Every bad request gets an OpenAI-style JSON error (400); the server never dies on bad input.
Text prompts are tokenized as their UTF-8 bytes; a token renders as one printable character.
Extension fields: `forced_output_ids` (the ids to "generate", e.g. the recorded output, so the next
call's prompt hits them) and `return_token_ids` (adds `token_ids` to each choice).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from aiohttp import web

from replay.errors import RequestFailed
from replay.protocol import CompletionRequest
from replay.sim.engine import Seq
from replay.sim.metrics import SimCollector, exposition
from replay.sim.options import SimConfig
from replay.sim.runner import EngineRunner, ScaledSimClock, settle
from replay.sim.transport import SimTransport
from replay.trace.tokens import output_tokens

__all__ = ["build_app", "serve", "BadRequest"]

MAX_BODY_BYTES = 64 << 20
_MAX_TOKEN_ID = (1 << 31) - 1


class BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


class ModelNotFound(BadRequest):
    """A `model` the server does not serve: 404, as vLLM answers it."""


def _error(status: int, message: str, param: str | None = None) -> web.Response:
    # vLLM's error types (vllm/entrypoints/serve/exception_handling/error_response.py,
    # create_error_response: BadRequestError by default; the model check's NotFoundError)
    kind = "BadRequestError" if status < 500 else "InternalServerError"
    if status == 404:
        kind = "NotFoundError"
    body = {"error": {"message": message, "type": kind, "param": param, "code": status}}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


@web.middleware
async def _errors(request: web.Request, handler):
    try:
        return await handler(request)
    except ModelNotFound as e:
        return _error(404, str(e), e.param)
    except BadRequest as e:
        return _error(400, str(e), e.param)
    except web.HTTPRequestEntityTooLarge:
        return _error(400, f"request body larger than {MAX_BODY_BYTES} bytes")
    except web.HTTPException as e:
        if e.status >= 400:
            return _error(e.status, e.reason or "error")
        raise
    except (ConnectionResetError, asyncio.CancelledError):
        raise
    except Exception as e:  # a bug, not the client's fault: still an OpenAI-shaped JSON error
        return _error(500, f"simulator server error: {e!r}")


def _int_field(body: dict, name: str, default: int, lo: int = 0) -> int:
    v = body.get(name)
    if v is None:  # absent or null: the default, as vLLM's protocol reads it
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadRequest(f"`{name}` must be an integer", name)
    if v < lo:
        raise BadRequest(f"`{name}` must be an integer >= {lo}", name)
    return v


def _user(body: dict) -> Any:
    """The request's `user` (the task whose calls it numbers): absent or null is no user, "-",
    as vLLM's `user: str | None = None` reads null."""
    user = body.get("user")
    return "-" if user is None else user


def _bool_field(body: dict, name: str, default: bool = False) -> bool:
    v = body.get(name)
    if v is None:
        return default
    if not isinstance(v, bool):  # stricter than vLLM's pydantic, which takes "false" and 0 too
        raise BadRequest(f"`{name}` must be true or false", name)
    return v


def _token_list(v: Any, name: str) -> np.ndarray:
    """Token ids as int32. Checked by numpy (a Python check of each id cost 17 ms of the loop a
    100K-token prompt); numpy reads true and false as 1 and 0, so those are looked for apart."""
    bad = BadRequest(f"`{name}` must be a list of token ids (integers >= 0)", name)
    if not isinstance(v, list):
        raise bad
    if not v:
        return np.empty(0, np.int32)
    try:
        arr = np.array(v)
    except (ValueError, OverflowError, TypeError):  # ragged, or past 64 bits
        raise bad from None
    if arr.ndim != 1 or arr.dtype.kind not in "iu" or arr.min() < 0 or arr.max() > _MAX_TOKEN_ID:
        raise bad
    for t in v:
        if t is True or t is False:
            raise bad
    return arr.astype(np.int32)


def _prompt(v: Any) -> np.ndarray:
    if isinstance(v, str):
        return np.frombuffer(v.encode("utf-8"), dtype=np.uint8).astype(np.int32)
    if isinstance(v, list) and v and isinstance(v[0], list | str):
        if len(v) != 1:
            raise BadRequest("batched prompts are not supported; send one prompt", "prompt")
        return _prompt(v[0])
    if isinstance(v, list):
        return _token_list(v, "prompt")
    raise BadRequest("`prompt` must be a string or a list of token ids", "prompt")


def _text(ids: np.ndarray) -> str:
    return "".join(chr(0x20 + int(i) % 95) for i in ids)


class SimServer:
    """Holds the engine, its runner and per-task request numbering."""

    def __init__(
        self, config: SimConfig, served_model_name: str | None = None, vocab_size: int | None = None
    ):
        self.config = config
        # reused for request checks and keying; its vocabulary draws the unforced outputs
        self.front = SimTransport(config, vocab_size=vocab_size or 32000)
        self.vocab_size = vocab_size  # when given, ids past it are refused as vLLM refuses them
        self.engine = self.front.engine
        self.runner = EngineRunner(self.engine, ScaledSimClock(config.time_scale))
        self.runner.on_change = self._on_change
        self._change: asyncio.Future | None = None  # what streams wait on for the next plan
        self._calls: dict[str, int] = {}
        self.served_model = served_model_name or config.model

    def _on_change(self) -> None:
        if self._change is not None:
            settle(self._change)
            self._change = None

    def changed(self) -> asyncio.Future:
        """Resolves when the runner next starts a plan, cuts one or goes idle."""
        if self._change is None:
            self._change = asyncio.get_running_loop().create_future()
        return self._change

    def reset_calls(self) -> None:
        """Forget per-user request numbers: the next request of each user is its call 0 again
        (unforced outputs are the trace's stand-ins for (user, call number), so a fresh replay
        after a cache reset gets the same outputs as the first)."""
        self._calls.clear()

    def gauges(self) -> dict[str, float]:
        # no gauge name ends in `_total`: Prometheus keeps that suffix for counters, and the
        # sim-server adapter reads every `replay_sim:*_total` as one (capacities are not)
        e = self.engine
        return {
            "num_requests_running": len(e.running),
            "num_requests_waiting": len(e.waiting),
            "device_blocks_used": e.device.n_cached + e.device.n_anon,
            "device_blocks_capacity": e.device.capacity,
            "host_chunks_used": len(e.host) if e.host is not None else 0,
            "host_chunks_capacity": e.host.capacity if e.host is not None else 0,
            "sim_time_seconds": self.runner.clock.now(),
        }

    def output_room(self, prompt_tokens: int, max_tokens: int) -> int:
        """`max_tokens` as vLLM 0.33 serves it against `--max-model-len`: a prompt or a
        max_tokens past the model's length alone is refused in vLLM's words
        (`vllm/renderers/params.py`, TokenizeParams), and otherwise the output is cut to what the
        model's length leaves (`vllm/entrypoints/serve/utils/api_utils.py`, get_max_tokens), so
        the call answers with fewer tokens, `finish_reason` "length". The simulated device's
        own limit stays a refusal (`check_lengths`)."""
        n = self.engine.cfg.max_model_len
        if max_tokens > n:
            raise BadRequest(
                f"max_tokens={max_tokens} cannot be greater than max_model_len={n}. "
                "Please request fewer output tokens.", "max_tokens",
            )  # fmt: skip
        if prompt_tokens > n:
            raise BadRequest(
                f"This model's maximum context length is {n} tokens. However, your prompt "
                f"contains {prompt_tokens} input tokens, which exceeds this limit even without "
                "any output tokens. Please reduce the length of the input prompt.", "prompt",
            )  # fmt: skip
        room = min(max_tokens, n - prompt_tokens)
        if room < 1:  # a prompt of exactly the model's length: SamplingParams refuses 0
            raise BadRequest(f"max_tokens must be at least 1, got {room}.", "max_tokens")
        return room

    def check_lengths(self, prompt_tokens: int, max_tokens: int) -> None:
        """Refuse a request that cannot fit the simulated device or model before anything of its
        size is allocated: its output ids alone would take 4 bytes a token, and the engine loop
        shares this process with /health."""
        try:
            self.front.check_lengths(prompt_tokens, max_tokens)
        except RequestFailed as e:
            # name the field at fault: the prompt alone, or what max_tokens adds to it
            alone = prompt_tokens >= self.engine.max_request_tokens()
            param = "prompt" if alone else "max_tokens"
            raise BadRequest(str(e).removeprefix("http_4xx: "), param) from None

    def parse(self, body: Any) -> tuple[Seq, np.ndarray, dict]:
        if not isinstance(body, dict):
            raise BadRequest("request body must be a JSON object")
        if "prompt" not in body:
            raise BadRequest("`prompt` is required", "prompt")
        model = body.get("model")
        if model is not None and not isinstance(model, str):
            raise BadRequest("`model` must be a string", "model")
        if model and model != self.served_model:  # vLLM: null or "" means the served model
            # vLLM's words: BaseServing._check_model (vllm/entrypoints/serve/engine/serving.py)
            raise ModelNotFound(
                f"The model `{model}` does not exist. Valid aliases: {self.served_model}.", "model"
            )
        max_tokens = _int_field(body, "max_tokens", 16, lo=-(1 << 63))
        if max_tokens < 1:  # vLLM's words (SamplingParams._verify_args)
            raise BadRequest(f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens")
        min_tokens = _int_field(body, "min_tokens", 0)
        raw = body["prompt"]
        if isinstance(raw, list) and raw and not isinstance(raw[0], list | str):
            try:  # before reading each id of a huge one
                self.check_lengths(len(raw), self.output_room(len(raw), max_tokens))
            except BadRequest:
                user = _user(body)
                if isinstance(user, str):  # a refused call still counts, as below
                    self._calls[user] = self._calls.get(user, 0) + 1
                raise
        prompt = _prompt(raw)
        if len(prompt) == 0:
            raise BadRequest("`prompt` is empty", "prompt")
        if self.vocab_size is not None and int(prompt.max()) >= self.vocab_size:
            # vLLM's words (renderers/base.py, BaseRenderer.validate_token_ids); a text prompt
            # is its UTF-8 bytes here, ids below 256
            raise BadRequest(f"Token id {int(prompt.max())} is out of vocabulary", "prompt")
        if min_tokens > max_tokens:
            raise BadRequest("`min_tokens` must be <= `max_tokens`", "min_tokens")
        n = body.get("n", 1)
        if n != 1:
            raise BadRequest("only n = 1 is supported", "n")
        user = _user(body)
        if not isinstance(user, str):
            raise BadRequest("`user` must be a string", "user")
        forced = body.get("forced_output_ids")
        if forced is not None:
            forced = _token_list(forced, "forced_output_ids")
            if len(forced) != max_tokens:
                raise BadRequest(
                    "`forced_output_ids` must have `max_tokens` ids", "forced_output_ids"
                )
        so = body.get("stream_options") or {}
        if not isinstance(so, dict):
            raise BadRequest("`stream_options` must be an object", "stream_options")
        stream = _bool_field(body, "stream")
        if so and not stream:  # vLLM's words (CompletionRequest.validate_stream_options)
            raise BadRequest(
                "Stream options can only be defined when `stream=True`.", "stream_options"
            )
        call = self._calls.get(user, 0)
        self._calls[user] = call + 1  # a refused call still counts: the next one is call + 1
        max_tokens = self.output_room(len(prompt), max_tokens)
        self.check_lengths(len(prompt), max_tokens)
        if forced is not None:
            forced = forced[:max_tokens]  # cut with the output, as the engine would stop there
        if forced is None:
            forced = output_tokens(user, call, max_tokens, self.front.vocab_size)
        req = CompletionRequest(user, call, prompt, max_tokens, forced_output=forced)
        try:
            seq = self.front.make_seq(req)
        except RequestFailed as e:
            raise BadRequest(str(e).removeprefix("http_4xx: "), "prompt") from None
        opts = {
            "stream": stream,
            "include_usage": _bool_field(so, "include_usage"),
            "token_ids": _bool_field(body, "return_token_ids"),
            "model": self.served_model,
        }
        return seq, forced, opts


def _usage(seq: Seq) -> dict:
    return {
        "prompt_tokens": seq.prompt_len,
        "completion_tokens": seq.output_len,
        "total_tokens": seq.prompt_len + seq.output_len,
        "prompt_tokens_details": {
            "cached_tokens": seq.cached_tokens,
            "device": seq.device_hit_tokens,
            "host": seq.host_restore_tokens,
        },
    }


SIM_SERVER = web.AppKey("sim", SimServer)


def build_app(
    config: SimConfig, served_model_name: str | None = None, vocab_size: int | None = None
) -> web.Application:
    """The aiohttp application; the engine loop starts with the app and stops with it."""
    srv = SimServer(config, served_model_name, vocab_size)
    started = int(time.time())
    collector = SimCollector(srv.engine.counters, srv.gauges)
    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[_errors])
    app[SIM_SERVER] = srv  # for handlers and tests that hold only the app

    async def on_startup(app: web.Application) -> None:
        srv.runner.start()

    async def on_cleanup(app: web.Application) -> None:
        await srv.runner.stop()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)

    async def completions(request: web.Request) -> web.StreamResponse:
        return await _completions(srv, request)

    async def models(request: web.Request) -> web.Response:
        data = {
            "object": "list",
            "data": [
                {  # vLLM's ModelCard fields (vllm/entrypoints/serve/engine/protocol.py)
                    "id": srv.served_model,
                    "object": "model",
                    "created": started,
                    "owned_by": "replay-sim",
                    "root": srv.served_model,
                    "parent": None,
                    "max_model_len": config.max_model_len,
                    "permission": [],
                }
            ],
        }
        return web.Response(body=orjson.dumps(data), content_type="application/json")

    async def health(request: web.Request) -> web.Response:
        return web.Response()  # 200 and no body, as vLLM's /health

    async def version(request: web.Request) -> web.Response:
        # what vLLM answers too: a run's provenance names the engine's version for every engine
        from replay import __version__

        return web.Response(
            body=orjson.dumps({"version": f"replay-sim {__version__}"}),
            content_type="application/json",
        )

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(
            body=exposition(collector), headers={"Content-Type": "text/plain; version=0.0.4"}
        )

    async def reset(request: web.Request) -> web.Response:
        srv.engine.reset_prefix_cache()
        srv.reset_calls()
        # vLLM's answer (vllm/entrypoints/serve/dev/cache/api_router.py)
        return web.Response(body=orjson.dumps({"success": True}), content_type="application/json")

    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/version", version)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/reset_prefix_cache", reset)
    return app


async def _completions(srv: SimServer, request: web.Request) -> web.StreamResponse:
    """POST /v1/completions: check the request, hand it to the engine, answer with one JSON
    object or an event stream once the engine has run it."""
    # vLLM's check and words (vllm/entrypoints/serve/utils/api_utils.py, validate_json_request)
    if request.content_type.lower() != "application/json":
        raise BadRequest("Unsupported Media Type: Only 'application/json' is allowed")
    raw = await request.read()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise BadRequest(f"body is not valid JSON: {e}") from None
    seq, out_ids, opts = srv.parse(body)
    loop = asyncio.get_running_loop()
    first = loop.create_future()
    done = loop.create_future()
    seq.on_first = lambda s: settle(first)
    seq.on_done = lambda s: settle(done)
    seq.on_fail = lambda s, e: settle(done, e)
    try:
        srv.runner.submit(seq)
    except RuntimeError as e:
        return _error(500, str(e))
    # vLLM's id: the X-Request-Id header's, else a random uuid (BaseServing._base_request_id)
    rid = f"cmpl-{request.headers.get('X-Request-Id') or uuid.uuid4().hex}"
    created = int(time.time())
    head = {"id": rid, "object": "text_completion", "created": created, "model": opts["model"]}
    if not opts["stream"]:
        try:
            await done
        except asyncio.CancelledError:  # the client went away: free the engine of its request
            srv.runner.cancel(seq)
            raise
        except Exception as e:
            return _error(500, f"simulator engine failed: {e!r}")
        obj = dict(head, choices=[_choice(out_ids, "length", opts)], usage=_usage(seq))
        return web.Response(body=orjson.dumps(obj), content_type="application/json")
    try:
        return await _stream(request, srv, head, seq, out_ids, opts, first, done)
    except asyncio.CancelledError:
        srv.runner.cancel(seq)  # the client went away mid-stream: free the engine of it
        raise


def _choice(ids: np.ndarray, finish: str | None, opts: dict) -> dict:
    c: dict[str, Any] = {"index": 0, "text": _text(ids), "logprobs": None}
    c["finish_reason"] = finish
    c["stop_reason"] = None  # vLLM's choices carry it, null for a length stop
    if opts["token_ids"]:
        c["token_ids"] = [int(i) for i in ids]
    return c


async def _stream(
    request: web.Request,
    srv: SimServer,
    head: dict,
    seq: Seq,
    out_ids: np.ndarray,
    opts: dict,
    first: asyncio.Future,
    done: asyncio.Future,
) -> web.StreamResponse:
    """The event stream of one request, as an engine streams it: the first token when its prefill
    ends, then each decode step's token at that step's end (on the server's clock; tokens due
    while the handler was busy go together), the last with its finish reason once the request is
    done, then usage (if asked) and [DONE]."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)

    async def send(obj: dict | str) -> None:
        data = obj if isinstance(obj, str) else orjson.dumps(obj).decode()
        await resp.write(f"data: {data}\n\n".encode())

    try:
        await asyncio.wait([first, done], return_when=asyncio.FIRST_COMPLETED)
        sent = 0
        # a one-token output is finished with its first token: vLLM sends it once, with its
        # finish reason (below), not a token and then an empty chunk
        if first.done() and len(out_ids) > 1:
            await send(dict(head, choices=[_choice(out_ids[:1], None, opts)]))
            sent = 1
        while not done.done():
            ready = min(srv.runner.tokens_ready(seq), len(out_ids) - 1)  # the last: at the end
            if ready > sent:
                await send(dict(head, choices=[_choice(out_ids[sent:ready], None, opts)]))
                sent = ready
            delay_s = srv.runner.next_step_wall_s(seq)
            await asyncio.wait(
                [done, srv.changed()], timeout=delay_s, return_when=asyncio.FIRST_COMPLETED
            )
        await done
        await send(dict(head, choices=[_choice(out_ids[sent:], "length", opts)]))
        if opts["include_usage"]:
            await send(dict(head, choices=[], usage=_usage(seq)))
        await send("[DONE]")
    except ConnectionResetError:
        # the client went away (a cancelled call, a client's Ctrl-C): nothing to tell it, and
        # nothing wrong here; raised on, aiohttp logged a 33-line traceback for each one
        if not done.done():
            srv.runner.cancel(seq)  # free the engine of it
        return resp
    except asyncio.CancelledError:
        raise
    except Exception as e:  # the engine failed mid-stream: say so in the stream, then end it
        await send({"error": {"message": f"simulator engine failed: {e!r}", "code": 500}})
        await send("[DONE]")
    await resp.write_eof()
    return resp


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def warm_up(config: SimConfig) -> bool:
    """Run two calls sharing a prefix through a throwaway engine of this configuration, in
    virtual time: its compiled kernels load (or compile, the first time in a checkout) before
    the server says it is ready, not inside the first calls' latency (the first pool's calls
    took 6.35 s to their first token, the next slowest 24 ms). False: the configuration refused
    the calls (a device smaller than they are); it still serves what fits."""
    from replay.clock import run_virtual

    async def two_calls() -> None:
        sim = SimTransport(config, vocab_size=32000)
        await sim.start()
        try:
            # the second call: the first's context plus new chunks (device hits, host lookups)
            unit = max(config.block_tokens, config.chunk_tokens)
            n = max(2, min(2 * unit, config.max_model_len // 4))
            prompt = np.arange(n, dtype=np.int32)
            out = np.arange(1, 3, dtype=np.int32)
            for call in range(2):
                await sim.complete(CompletionRequest("warm-up", call, prompt, 2, forced_output=out))
                prompt = np.concatenate([prompt, out, np.arange(n, 2 * n, dtype=np.int32)])
        finally:
            await sim.close()

    try:
        run_virtual(two_calls)
    except RequestFailed:
        return False
    return True


def app_runner(app: web.Application) -> web.AppRunner:
    """How the server runs `app`. handler_cancellation: a client that disconnects cancels its
    handler, which frees the engine of its request (aiohttp's default let it run to its end, as
    load on every later call, and held shutdown for 60 s draining such handlers)."""
    return web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=5.0)


async def serve(
    config: SimConfig,
    host: str,
    port: int,
    ready_file: str | None = None,
    served_model_name: str | None = None,
    vocab_size: int | None = None,
) -> None:
    """Warm the engine up, bind, write the bound port to `ready_file` (atomically), serve until
    cancelled."""
    await asyncio.to_thread(warm_up, config)
    runner = app_runner(build_app(config, served_model_name, vocab_size))
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        server: Any = site._server
        bound = port
        if server is not None and server.sockets:
            bound = server.sockets[0].getsockname()[1]
        print(f"replay sim serving on http://{host}:{bound}", flush=True)
        if ready_file:
            _write_atomic(Path(ready_file), f"{bound}\n")
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.Event().wait()
    finally:
        # the port file first: a second signal cancels the cleanup's await, and a port file
        # left behind would name a port nothing serves any more
        if ready_file:
            with contextlib.suppress(OSError):
                Path(ready_file).unlink()
        await runner.cleanup()
