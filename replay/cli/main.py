"""`replay` entry point: one click group; each subcommand lives in its own module, listed explicitly."""

from __future__ import annotations

import sys

import click

from replay import __version__
from replay.errors import ReplayError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="replay")
def cli() -> None:
    """Replay agent traces against LLM servers or the reference simulator, and sweep KV tiers."""


def _register() -> None:
    # Explicit registry (no import magic): each module exposes one click command or group.
    from replay.cli import predict_cmd, report_cmd, run_cmd, sim_cmd, sweep_cmd, trace_cmd
    from replay.cli import trace_transform_cmd as transform

    for mod in (trace_cmd, run_cmd, sim_cmd, predict_cmd, sweep_cmd, report_cmd):
        cli.add_command(mod.command)
    transform.add_to(trace_cmd.command)  # scale, slice, merge: subcommands of `trace`


_register()


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; project errors print one line (no traceback) and set the exit code."""
    try:
        rc = cli.main(args=argv, prog_name="replay", standalone_mode=False)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except ReplayError as e:
        click.echo(f"replay: {e}", err=True)
        sys.exit(e.exit_code)
    # In non-standalone mode click returns an Exit's code instead of raising it.
    if isinstance(rc, int) and rc:
        sys.exit(rc)


if __name__ == "__main__":
    main()
