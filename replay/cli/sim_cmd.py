"""`replay sim`: the reference engine simulator's OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys

import click

from replay.cli.sim_options import sim_options
from replay.errors import ConfigError, ReplayError
from replay.sim.options import SimConfig


@click.group(name="sim")
def command() -> None:
    """The reference engine simulator (device + host KV tiers, roofline timing)."""


@command.command(name="serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="address to bind")
@click.option("--port", type=int, required=True, help="port to bind (0: any free port)")
@click.option("--ready-file", default=None, help="write the bound port here once listening")
@click.option(
    "--served-model-name",
    default=None,
    help="the `model` it answers to and lists [default: the --model preset]; others get 404",
)
@click.option(
    "--vocab-size",
    type=click.IntRange(min=2, max=1 << 31),
    default=None,
    help="the served model's vocabulary: a prompt id past it gets vLLM's 400 'out of "
    "vocabulary', and unforced outputs are drawn from it [default: no check, outputs from 32000]",
)
@sim_options
def serve_cmd(
    host: str,
    port: int,
    ready_file: str | None,
    served_model_name: str | None,
    vocab_size: int | None,
    **simopts,
) -> None:
    """Serve /v1/completions, /v1/models, /health, /metrics, /reset_prefix_cache."""
    from replay.sim.server import serve

    config = SimConfig.from_options(**simopts)
    if not 0 <= port <= 65535:
        raise ConfigError("--port", "port", f"must be in 0..65535, got {port}")

    async def main() -> None:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        # a graceful stop (ready file removed, port freed, exit 0, as servers stop on SIGTERM);
        # SIGHUP (a closed terminal) too: it killed the server with its ready file left behind
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, task.cancel)  # type: ignore[union-attr]
        try:
            await serve(config, host, port, ready_file, served_model_name, vocab_size)
        except OSError as e:
            raise ConfigError("--port", "port", f"cannot bind {host}:{port}: {e}") from None

    with contextlib.suppress(asyncio.CancelledError):
        asyncio.run(main())


@command.command(name="presets")
def presets_cmd() -> None:
    """List the hardware and model presets with their key numbers."""
    from replay.model.presets import HARDWARE, MODELS

    for h in HARDWARE.values():
        click.echo(
            f"hardware {h.name:18s} {h.peak_flops / 1e12:8.1f} TFLOP/s  "
            f"HBM {h.hbm_bytes_per_s / 1e9:7.0f} GB/s  link {h.host_link_bytes_per_s / 1e9:5.0f} "
            f"GB/s  compute/host-byte {h.compute_per_host_byte:8.0f}"
        )
    for m in MODELS.values():
        click.echo(f"model    {m.name:20s} KV bytes/token at TP1 {m.bytes_per_token(1)}")


def main(argv: list[str]) -> int:
    """`replay sim` with the CLI's error contract (one line, exit code), minus the imports of every
    other subcommand: the `sim-server` engine launches `python -m replay.cli.sim_cmd serve ...`."""
    try:
        command.main(args=argv, prog_name="replay sim", standalone_mode=False)
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except ReplayError as e:
        print(f"replay: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
