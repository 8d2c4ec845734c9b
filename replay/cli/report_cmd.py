"""`replay report RESULTS_DIR`: write report.md and figures/ for a results directory."""

from __future__ import annotations

import click


@click.command(name="report")
@click.argument("results_dir", type=click.Path(file_okay=False, path_type=str))
@click.option("--no-figures", is_flag=True, help="Write the tables and text only (faster).")
@click.option(
    "--html",
    "html_out",
    is_flag=True,
    help="Also write report.html: one self-contained page (tables, inline SVG figures, "
    "provenance, the experiment file; nothing fetched).",
)
@click.option(
    "--vs",
    "vs",
    type=click.Path(file_okay=False, path_type=str),
    default=None,
    help="A simulated sweep's results directory (e.g. a calibrated twin's, [engine] kind = "
    '"sim"): adds the section "Simulated vs measured", pairing points by name.',
)
@click.option(
    "--paper",
    is_flag=True,
    help="Also write docs/paper.md: the paper-* experiments found beside RESULTS_DIR set against "
    "the EfficientAgent study's published numbers.",
)
@click.option(
    "--paper-out",
    type=click.Path(dir_okay=False, path_type=str),
    default="docs/paper.md",
    show_default=True,
    help="Where --paper writes.",
)
def command(
    results_dir: str, no_figures: bool, html_out: bool, vs: str | None, paper: bool, paper_out: str
) -> None:
    """Write RESULTS_DIR/report.md and RESULTS_DIR/figures/*.png|svg from the runs found there."""
    # Imported here: pandas, scipy and matplotlib would slow every other subcommand's start.
    from replay.report import write_report

    out = write_report(results_dir, figures=not no_figures, html=html_out, vs=vs)
    click.echo(f"written: {out.report} ({len(out.figures)} figure files)")
    if out.html is not None:
        click.echo(f"written: {out.html}")
    for caption, why in out.skipped.items():
        click.echo(f"  not drawn: {caption}: {why}")
    if paper:
        from pathlib import Path

        from replay.errors import ConfigError
        from replay.studies.efficientagent.page import missing_experiments, write_paper

        # The paper-* experiments live side by side under one results root.
        root = Path(results_dir).resolve().parent
        missing = missing_experiments(root)
        if missing and Path(paper_out).exists():
            raise ConfigError(
                "report",
                "--paper",
                f"no results under {root} for {', '.join(missing)}: the page would score them "
                f"'not run' and replace {paper_out}; run them first, or give --paper-out NEW_FILE "
                "for a partial page",
            )
        path = write_paper(root, paper_out)
        click.echo(f"written: {path}")
