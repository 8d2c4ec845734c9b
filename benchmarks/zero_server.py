"""A zero-latency OpenAI-compatible completions server, for measuring the client alone.

Runs in its own process (`python -m benchmarks.zero_server --port 0 --ready-file F`) so its CPU is
not charged to the client being measured. It answers at once with one token chunk, usage, [DONE]
(chunks tagged `"object": "text_completion"` as vLLM's are; AIPerf drops chunks without it),
and counts prompt tokens without parsing the list (commas after `"prompt":`), so 100K-token bodies
cost it little. Clients must put `prompt` last in the body (both ours and the baseline do).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson

_PROMPT_KEY = b'"prompt":'


class _Http(asyncio.Protocol):
    """HTTP/1.1 keep-alive, Content-Length bodies only (what aiohttp, httpx and urllib send)."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[:end]).lower()
            length = 0
            i = head.find(b"content-length:")
            if i >= 0:
                j = head.find(b"\r\n", i)
                length = int(head[i + 15 : j if j >= 0 else len(head)])
            if len(self.buf) < end + 4 + length:
                return
            body = bytes(self.buf[end + 4 : end + 4 + length])
            del self.buf[: end + 4 + length]
            assert self.transport is not None
            self.transport.write(_answer(head, body))


def _answer(head: bytes, body: bytes) -> bytes:
    if head.startswith(b"get /v1/models"):
        payload = b'{"object":"list","data":[{"id":"zero","object":"model"}]}'
        return _response(b"application/json", payload)
    if head.startswith(b"get"):
        return _response(b"application/json", b"{}")
    p = body.find(_PROMPT_KEY)
    fields = orjson.loads(body[:p].rstrip(b", ") + b"}") if p > 0 else {}
    n_prompt = body.count(b",", p) + 1 if p > 0 else 0
    n_out = int(fields.get("max_tokens", 1))
    usage = {"prompt_tokens": n_prompt, "completion_tokens": n_out,
             "total_tokens": n_prompt + n_out}  # fmt: skip
    sse = (
        b'data: {"object":"text_completion","choices":[{"index":0,"text":"x",'
        b'"finish_reason":"length"}]}\n\n'
        b'data: {"object":"text_completion","choices":[],"usage":'
        + orjson.dumps(usage)
        + b"}\n\ndata: [DONE]\n\n"
    )
    return _response(b"text/event-stream", sse)


def _response(ctype: bytes, payload: bytes) -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: " + ctype + b"\r\ncontent-length: "
        + str(len(payload)).encode() + b"\r\n\r\n" + payload
    )  # fmt: skip


async def serve(port: int, ready_file: str | None) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Http, "127.0.0.1", port, backlog=4096)
    bound = server.sockets[0].getsockname()[1]
    if ready_file:
        tmp = ready_file + ".tmp"
        Path(tmp).write_text(str(bound))
        os.replace(tmp, ready_file)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


class ZeroServer:
    """Start the server in a child process; `url` once started; always stopped on exit."""

    def __init__(self, tmp_dir: str | Path) -> None:
        self.ready = Path(tmp_dir) / "zero_server.port"
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def __enter__(self) -> ZeroServer:
        self.ready.unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmarks.zero_server",
                "--port",
                "0",
                "--ready-file",
                str(self.ready),
            ],  # fmt: skip
            cwd=Path(__file__).resolve().parents[1],
        )
        deadline = time.monotonic() + 30
        while not self.ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError("zero server did not start")
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{int(self.ready.read_text())}"
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def cpu_s(self) -> float:
        """CPU seconds the server process used so far (Linux /proc), for context in reports."""
        assert self.proc is not None
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ready-file", default=None)
    args = ap.parse_args()
    asyncio.run(serve(args.port, args.ready_file))


if __name__ == "__main__":
    main()
