"""The task identity the EfficientAgent study's connector reads: `kv_transfer_params =
{"efficientagent.task_id": task}` on every request, on by default for lmcache, off otherwise,
chosen by `replay run --[no-]efficientagent-task-id` and `[run] efficientagent_task_id`.

The requests go to the project's simulator server on loopback; a middleware added to its app
records each body as the server received it (the server itself accepts and ignores the field)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from aiohttp import web

from replay.driver.options import task_identity_fields
from replay.engines.registry import get_engine
from replay.errors import ConfigError
from replay.sim.options import SimConfig
from replay.sim.server import build_app
from replay.sweep.config import load_experiment
from replay.sweep.run_steps import _run_options
from replay.trace.io import write_trace
from replay.trace.synth import synth


class RecordingSimServer:
    """The simulator's app in a thread of its own, recording every completion request body."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.url = ""
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._start())
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._runner.cleanup())

    async def _start(self) -> None:
        app = build_app(SimConfig.from_options(device_kv_gib=0.5))

        @web.middleware
        async def record(request: web.Request, handler):
            if request.path == "/v1/completions":
                self.bodies.append(orjson.loads(await request.read()))
            return await handler(request)

        app.middlewares.append(record)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"

    def __enter__(self) -> RecordingSimServer:
        self._thread.start()
        assert self._ready.wait(30), "the simulator server did not start"
        return self

    def __exit__(self, *exc) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("trace") / "t.jsonl.gz"
    write_trace(synth("swe-agent", tasks=3, seed=4, scale=0.01, max_calls_per_task=3), path)
    return path


@pytest.fixture
def server() -> Iterator[RecordingSimServer]:
    with RecordingSimServer() as s:
        yield s


def _run(trace: Path, out: Path, url: str, *flags: str, capsys) -> dict:
    from replay.cli.main import main

    argv = ["run", "--trace", str(trace), "--pool", "2", "--out", str(out), "--url", url]
    code: object = 0
    try:
        main([*argv, "--gap-scale", "0", "--quiet", *flags])
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert code in (0, None), err
    return orjson.loads((out / "run.json").read_bytes())


@pytest.mark.parametrize(
    ("flags", "sent"),
    [
        (("--engine-kind", "lmcache"), True),  # the default for lmcache
        (("--engine-kind", "lmcache", "--no-efficientagent-task-id"), False),
        (("--engine-kind", "vllm"), False),  # off for every other engine
        (("--engine-kind", "vllm", "--efficientagent-task-id"), True),
        (("--engine-kind", "sim-server"), False),
    ],
)
def test_run_sends_the_task_identity_the_studys_connector_reads(
    trace_file, tmp_path, server, capsys, flags, sent
):
    doc = _run(trace_file, tmp_path / "out", server.url, *flags, capsys=capsys)
    assert doc["status"] == "ok" and doc["config"]["efficientagent_task_id"] is sent
    assert len(server.bodies) == doc["summary"]["calls"] == 9
    if sent:
        # one flat key with a dot, as the release's connector reads it, naming the body's task
        assert all(
            b["kv_transfer_params"] == {"efficientagent.task_id": b["user"]} for b in server.bodies
        )
        assert {b["user"] for b in server.bodies} == {
            "swe-agent-0000",
            "swe-agent-0001",
            "swe-agent-0002",
        }
    else:
        assert all("kv_transfer_params" not in b for b in server.bodies)


def test_identity_joins_other_kv_transfer_params_and_extras():
    extras = {"vllm_xargs": {"forced_token_ids": [1]}, "kv_transfer_params": {"lmcache.tag": "x"}}
    got = task_identity_fields("t-1", extras)
    assert got == {
        "vllm_xargs": {"forced_token_ids": [1]},
        "kv_transfer_params": {"lmcache.tag": "x", "efficientagent.task_id": "t-1"},
    }
    assert extras["kv_transfer_params"] == {"lmcache.tag": "x"}  # the adapter's dict untouched


def test_sweep_default_follows_the_adapter_and_the_experiment_file_overrides_it():
    assert get_engine("lmcache").sends_task_id and not get_engine("vllm").sends_task_id
    assert _run_options(get_engine("lmcache"), {"pool": 1}).efficientagent_task_id is True
    assert _run_options(get_engine("vllm"), {"pool": 1}).efficientagent_task_id is False
    off = {"pool": 1, "efficientagent_task_id": False}
    assert _run_options(get_engine("lmcache"), off).efficientagent_task_id is False


EXPERIMENT = """name = "t"
[trace]
synth = {{ preset = "swe-agent", tasks = 2, seed = 1, max_calls_per_task = 2 }}
[run]
pool = 1
efficientagent_task_id = {value}
[engine]
kind = "sim"
"""


def test_experiment_file_takes_the_option_and_refuses_a_non_boolean(tmp_path):
    p = tmp_path / "t.toml"
    p.write_text(EXPERIMENT.format(value="true"))
    assert dict(load_experiment(p).run)["efficientagent_task_id"] is True
    p.write_text(EXPERIMENT.format(value='"yes"'))
    with pytest.raises(ConfigError) as e:
        load_experiment(p)
    assert "efficientagent_task_id" in str(e.value)
