"""`replay sim` subcommand (being built; see its issue)."""

from __future__ import annotations

import click


@click.group(name="sim")
def command() -> None:
    """(not built yet)"""
