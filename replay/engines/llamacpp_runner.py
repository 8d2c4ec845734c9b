"""Start llama.cpp's server for a replay: the `xllamacpp` wheel in this process, or a `llama-server`.

The wheel embeds the same server (`xllamacpp.CommonParams` + `xllamacpp.Server`) and needs no
build, so it is the default; `--server-bin PATH` execs a `llama-server` binary instead (built by
`make llama-server`, about 2x faster on CPU) with the same settings. `--model tiny` writes the
project's tiny random-weight GGUF first (see `replay.engines.gguf_tiny`), so either way a replay
runs without a model hub.

    python -m replay.engines.llamacpp_runner --model tiny --port 8080 --slots 2 --cache-ram-mib 16

With `--ready-file PATH` the wheel server binds `--port` (0: any free port) and writes the port it
bound into PATH once `/health` answers; the sweep's server lifecycle reads it from there. SIGTERM or
SIGINT stops the server and exits 0.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

__all__ = ["build_parser", "resolve_model", "server_bin_argv", "main"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m replay.engines.llamacpp_runner", description=__doc__
    )
    p.add_argument(
        "--model", required=True, help="GGUF path, or 'tiny' for the project's tiny model"
    )
    p.add_argument(
        "--model-dir", default=None, help="where 'tiny' is written (default ~/.cache/replay/models)"
    )
    p.add_argument("--vocab", type=int, default=8192, help="vocab of the tiny model")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument(
        "--ctx-tokens", type=int, default=16384, help="total context over all slots (-c)"
    )
    p.add_argument("--slots", type=int, default=2, help="parallel slots (-np)")
    p.add_argument(
        "--cache-ram-mib", type=int, default=0, help="host prompt cache (--cache-ram); 0 = off"
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--http-threads",
        type=int,
        default=64,
        help="HTTP server threads (--threads-http): one per open keep-alive connection",
    )
    p.add_argument("--batch-tokens", type=int, default=2048, help="logical batch (-b)")
    p.add_argument("--server-bin", default=None, help="exec this llama-server instead of the wheel")
    p.add_argument("--ready-file", default=None, help="write the bound port here once healthy")
    p.add_argument(
        "--extra", action="append", default=[], help="extra llama-server argument (binary mode)"
    )
    return p


def resolve_model(model: str, model_dir: str | None, vocab: int) -> str:
    """A GGUF path: the given one (which must exist), or the tiny model written on demand."""
    if model == "tiny":
        from replay.engines.gguf_tiny import TinyLlamaShape, default_model_dir, ensure_tiny_gguf

        directory = Path(model_dir) if model_dir else default_model_dir()
        return str(ensure_tiny_gguf(directory, TinyLlamaShape(vocab_size=vocab)))
    if not os.path.isfile(model):
        raise SystemExit(f"replay: model file not found: {model} (give a GGUF path or 'tiny')")
    return model


def server_bin_argv(args: argparse.Namespace, model_path: str) -> list[str]:
    """The `llama-server` command line equivalent to the wheel settings."""
    return [
        args.server_bin,
        "-m",
        model_path,
        "--host",
        args.host,
        "--port",
        str(args.port),
        "-c",
        str(args.ctx_tokens),
        "-np",
        str(args.slots),
        "--cache-ram",
        str(args.cache_ram_mib),
        "-t",
        str(args.threads),
        "-tb",
        str(args.threads),
        "-b",
        str(args.batch_tokens),
        "--threads-http",
        str(args.http_threads),
        "--metrics",
        "--slots",
        "--no-webui",
        *args.extra,
    ]


def _write_atomic(path: str, text: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".ready")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _wait_healthy(url: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


def _run_wheel(args: argparse.Namespace, model_path: str) -> int:
    try:
        import xllamacpp
    except ImportError:
        print(
            "replay: xllamacpp is not installed: `make setup-llamacpp` (or pip install -e "
            "'.[llamacpp]'), or give --server-bin PATH to a llama-server",
            file=sys.stderr,
        )
        return 2

    params = xllamacpp.CommonParams()
    params.model.path = model_path
    params.hostnames = [args.host]
    params.port = args.port
    params.n_ctx = args.ctx_tokens
    params.n_parallel = args.slots
    params.cache_ram_mib = args.cache_ram_mib
    params.n_batch = args.batch_tokens
    params.endpoint_metrics = True
    params.endpoint_slots = True
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.n_threads_http = args.http_threads
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server = xllamacpp.Server(params)
    url = str(server.listening_address).rstrip("/")
    if not _wait_healthy(url, 120.0):
        print(f"replay: llama.cpp server at {url} did not become healthy", file=sys.stderr)
        return 1
    print(f"llamacpp_runner: xllamacpp {xllamacpp.__version__} listening on {url}", flush=True)
    if args.ready_file:
        _write_atomic(args.ready_file, url.rsplit(":", 1)[1])
    while not stop.wait(0.5):
        pass
    print("llamacpp_runner: stopping", flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    # The embedded server's threads do not all join on interpreter shutdown; leave at once.
    os._exit(0)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    model_path = resolve_model(args.model, args.model_dir, args.vocab)
    if args.server_bin:
        if args.ready_file:
            raise SystemExit(
                "replay: --ready-file needs the wheel server; give --port with --server-bin"
            )
        argv_bin = server_bin_argv(args, model_path)
        sys.stdout.flush()
        os.execv(argv_bin[0], argv_bin)
    return _run_wheel(args, model_path)


if __name__ == "__main__":
    raise SystemExit(main())
