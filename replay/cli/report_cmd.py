"""`replay report` subcommand (being built; see its issue)."""

from __future__ import annotations

import click


@click.group(name="report")
def command() -> None:
    """(not built yet)"""
