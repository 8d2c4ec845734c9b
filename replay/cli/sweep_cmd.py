"""`replay sweep FILE`: run (or resume) an experiment's points x repeats; `--dry-run` lists the
exact commands instead; `--ray` spreads the runs over a Ray cluster (docs/cluster.md)."""

from __future__ import annotations

import dataclasses
import sys

import click

from replay.sweep.config import load_experiment


def _echo_while_read(line: str) -> None:
    """A sweep's progress line on stdout; once nobody reads it (`replay sweep ... | head`), the
    lines go nowhere and the sweep goes on: a closed pipe ended it after one more run, exit 1,
    with no word."""
    import os

    try:
        click.echo(line)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # later writes, and the flush at exit, go nowhere
        os.close(devnull)


@click.command(name="sweep")
@click.argument("experiment_file", type=click.Path(dir_okay=False))
@click.option("--force", is_flag=True, help="rerun runs that already finished (default: resume)")
@click.option("--dry-run", is_flag=True, help="print each point's exact argv and environment")
@click.option(
    "--order",
    type=click.Choice(["random", "sequential"]),
    default=None,
    help="run order: seeded interleaved random (default from the file) or sequential",
)
@click.option("--results", "results_root", default=None, help="results root (default: results/)")
@click.option(
    "--keep-all-failed",
    is_flag=True,
    help="on resume, skip runs in which every call failed (default: run them again)",
)
@click.option(
    "--ray",
    "ray_address",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[ADDRESS]",
    help="run each point x repeat as a Ray task: ADDRESS auto (a cluster this machine is in), "
    "local (a private Ray here) or host:port; default: [cluster] address, else auto",
)
def command(
    experiment_file: str,
    force: bool,
    dry_run: bool,
    order: str | None,
    results_root: str | None,
    keep_all_failed: bool,
    ray_address: str | None,
) -> None:
    """Run EXPERIMENT_FILE (TOML): one server per run, counters, resumable results."""
    exp = load_experiment(experiment_file)
    if ray_address is not None:
        address = ray_address or exp.cluster.address
        cluster = dataclasses.replace(exp.cluster, backend="ray", address=address)
        exp = dataclasses.replace(exp, cluster=cluster)
    if dry_run:
        from replay.sweep.dryrun import dry_run_plan, format_plan

        shown = exp if results_root is None else dataclasses.replace(exp, results_dir=results_root)
        click.echo(format_plan(exp, dry_run_plan(shown, order)))
        if exp.cluster.backend == "ray":
            from replay.sweep.cluster_plan import resources_lines

            click.echo("\n" + "\n".join(resources_lines(exp, order)))
        return
    from replay.sweep.runner import run_sweep

    result = run_sweep(
        exp,
        force=force,
        order=order,
        results_root=results_root,
        echo=_echo_while_read,
        keep_all_failed=keep_all_failed,
    )
    counts: dict[str, int] = {}
    for o in result.outcomes:
        counts[o.status] = counts.get(o.status, 0) + 1
    click.echo(
        f"{exp.name}: "
        + (", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no run")
        + f"; summary: {result.exp_dir / 'summary.parquet'}"
    )
    for o in result.failed:
        click.echo(f"failed: {o.rel_dir}: {o.reason}", err=True)
    if result.interrupted:
        # with --force the same command would start over again, not resume
        again = "the same command without --force" if force else "the same command"
        click.echo(f"interrupted; rerun {again} to resume", err=True)
        sys.exit(130)
    ran = [o for o in result.outcomes if o.status != "skipped"]
    if ran and all(result.measured_nothing(o) for o in ran):
        sys.exit(1)  # every run failed, or every call of it: more likely the setup
