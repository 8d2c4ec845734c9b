"""`replay sweep` subcommand (being built; see its issue)."""

from __future__ import annotations

import click


@click.group(name="sweep")
def command() -> None:
    """(not built yet)"""
