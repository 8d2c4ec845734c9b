"""`replay trace` subcommand (being built; see its issue)."""

from __future__ import annotations

import click


@click.group(name="trace")
def command() -> None:
    """(not built yet)"""
