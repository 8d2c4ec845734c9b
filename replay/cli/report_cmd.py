"""`replay report RESULTS_DIR`: write report.md and figures/ for a results directory."""

from __future__ import annotations

import click


@click.command(name="report")
@click.argument("results_dir", type=click.Path(file_okay=False, path_type=str))
@click.option("--no-figures", is_flag=True, help="Write the tables and text only (faster).")
def command(results_dir: str, no_figures: bool) -> None:
    """Write RESULTS_DIR/report.md and RESULTS_DIR/figures/*.png|svg from the runs found there."""
    # Imported here: pandas, scipy and matplotlib would slow every other subcommand's start.
    from replay.report import write_report

    out = write_report(results_dir, figures=not no_figures)
    click.echo(f"written: {out.report} ({len(out.figures)} figure files)")
    for caption, why in out.skipped.items():
        click.echo(f"  not drawn: {caption}: {why}")
