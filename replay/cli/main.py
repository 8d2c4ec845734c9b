"""`replay` entry point: one click group; each subcommand lives in its own module, listed explicitly."""

from __future__ import annotations

import errno
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
    from replay.cli import (
        calibrate_cmd,
        compare_cmd,
        doctor_cmd,
        predict_cmd,
        report_cmd,
        run_cmd,
        sim_cmd,
        sweep_cmd,
        trace_cmd,
    )
    from replay.cli import trace_transform_cmd as transform

    for mod in (
        trace_cmd,
        run_cmd,
        sim_cmd,
        predict_cmd,
        sweep_cmd,
        report_cmd,
        compare_cmd,
        calibrate_cmd,
        doctor_cmd,
    ):
        cli.add_command(mod.command)
    cli.add_command(doctor_cmd.model_command)
    transform.add_to(trace_cmd.command)  # scale, slice, merge: subcommands of `trace`


_register()


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; project errors print one line (no traceback) and set the exit code."""
    try:
        rc = cli.main(args=argv, prog_name="replay", standalone_mode=False)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.UsageError as e:
        if "\n" in e.format_message():  # `replay` alone: the help is the message
            e.show()
        else:
            click.echo(_usage_line(e), err=True)
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
    except OSError as e:
        # A path the user named that cannot be read or written (--out under /proc, a directory
        # for a file): one line, exit 2. A full or failing disk is not bad input: exit 1.
        where = e.filename if e.filename is not None else "-"
        click.echo(f"replay: {where}: {e.strerror or e}", err=True)
        sys.exit(1 if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO) else 2)
    # In non-standalone mode click returns an Exit's code instead of raising it.
    if isinstance(rc, int) and rc:
        sys.exit(rc)


def _usage_line(e: click.UsageError) -> str:
    """click's usage error as one line, `replay: COMMAND: why (see --help)`, like our own errors
    (click prints the usage block, a hint and the error on three)."""
    path = e.ctx.command_path.removeprefix("replay").strip() if e.ctx is not None else ""
    where = f"{path}: " if path else ""
    return f"replay: {where}{e.format_message()} (see --help)"


if __name__ == "__main__":
    main()
