"""`replay` entry point: one click group; each subcommand lives in its own module, listed explicitly."""

from __future__ import annotations

import errno
import sys

import click

from replay import __version__
from replay.errors import ReplayError


class _Commands(click.Group):
    """The subcommands, each imported when it is named (or when `replay --help` lists them).

    `replay run` on a 100K-token trace costs a few seconds of CPU in all, and importing every
    subcommand's module (sweep, doctor, predict: pydantic, aiohttp, prometheus_client, numba's
    neighbours) was a third of it; a command pays only for what it imports itself.
    """

    NAMES = ("calibrate", "compare", "doctor", "model", "predict", "report", "run", "sim",
             "sweep", "trace")  # fmt: skip

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.NAMES)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.NAMES:
            self.add_command(_load(cmd_name), cmd_name)
        return self.commands.get(cmd_name)


def _load(name: str) -> click.Command:
    """One subcommand, from its module. Explicit imports, one per name (no import by string),
    so the import graph (tests/test_vocab_layers.py) still sees every edge."""
    if name == "calibrate":
        from replay.cli.calibrate_cmd import command
    elif name == "compare":
        from replay.cli.compare_cmd import command
    elif name == "doctor":
        from replay.cli.doctor_cmd import command
    elif name == "model":
        from replay.cli.doctor_cmd import model_command as command
    elif name == "predict":
        from replay.cli.predict_cmd import command
    elif name == "report":
        from replay.cli.report_cmd import command
    elif name == "run":
        from replay.cli.run_cmd import command
    elif name == "sim":
        from replay.cli.sim_cmd import command
    elif name == "sweep":
        from replay.cli.sweep_cmd import command
    else:
        from replay.cli import trace_transform_cmd
        from replay.cli.trace_cmd import command as group

        trace_transform_cmd.add_to(group)  # scale, slice, merge: subcommands of `trace`
        return group
    return command


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="replay")
def cli() -> None:
    """Replay agent traces against LLM servers or the reference simulator, and sweep KV tiers."""


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; project errors print one line (no traceback) and set the exit code.
    SIGTERM and SIGHUP stop every command as Ctrl-C does (exit 130, its cleanup run): they ended
    a trace command with no word and its temporary file left beside -o."""
    from replay.signals import sigterm_as_interrupt

    try:
        with sigterm_as_interrupt():
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
