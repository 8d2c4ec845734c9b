"""`replay run` subcommand (being built; see its issue)."""

from __future__ import annotations

import click


@click.group(name="run")
def command() -> None:
    """(not built yet)"""
