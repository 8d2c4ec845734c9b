"""`replay predict`'s human-readable output: one printer per mode (`--json` writes the document
as it is)."""

from __future__ import annotations

import click

from replay.counters import COMPUTED_PREFILL_TOKENS

__all__ = [
    "fmt",
    "gib",
    "tier",
    "print_closed_form",
    "print_economics",
    "print_sessions",
    "print_tiers",
]


def fmt(x, digits: int = 2) -> str:
    if x is None:
        return "inf"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return f"{x:,}"


def gib(x: float) -> str:
    """A size in GiB to 4 significant digits: tiny tiers (a CPU engine's MiB) stay apart, where
    two decimals printed 0.0001 and 0.001 GiB alike as 0.00."""
    return f"{x:,.2f}" if x >= 10 else f"{x:.4g}"


def tier(x: float) -> str:
    """A tier as given on the command line: whole GiB as integers, others to 4 significant
    digits (one format down the column: `_gib`'s two decimals from 10 GiB up printed 5 beside
    10.00)."""
    return f"{int(x):,}" if float(x).is_integer() else f"{x:.4g}"


def print_tiers(doc: dict) -> None:
    # with the engine's queue each tier has its own schedule, so its own device hits: a column
    per_tier = bool(doc.get("engine_queue")) and any("device_hit_tokens" in r for r in doc["tiers"])
    hits = "" if per_tier else f"; device hits {doc['device_hit_tokens']:,} tokens"
    click.echo(
        f"{doc['calls']} calls, {doc['prompt_tokens']:,} prompt tokens, order {doc['order']}, "
        f"pool {doc['pool']}: working set {gib(doc['working_set_gib'])} GiB{hits}"
    )
    pays = doc.get("offload_pays_from_gib")
    if doc.get("offload_pays_searched") is False:
        click.echo("offload pays (restores >= writes) from: not searched (--no-pays)")
    else:
        click.echo(
            "offload pays (restores >= writes) from "
            + ("never" if pays is None else f"{gib(pays)} GiB")
        )
    cols = [
        ("host_tier_gib", "tier GiB"),
        ("pressure_ratio", "pressure"),
        ("host_coverage_tokens", "coverage"),
        ("host_restore_tokens", "restored"),
        (COMPUTED_PREFILL_TOKENS, "computed"),
        ("host_write_tokens", "written"),
        *([("device_hit_tokens", "device hits")] if per_tier else []),
    ]
    click.echo("  ".join(f"{h:>14}" for _, h in cols))
    for row in doc["tiers"]:
        cells = [tier(row[k]) if k == "host_tier_gib" else fmt(row[k]) for k, _ in cols]
        click.echo("  ".join(f"{c:>14}" for c in cells))
    rng = doc.get("range")
    if rng is None:
        return
    if "unavailable" in rng:  # --ranges asked for and not given: say why, as the JSON does
        click.echo(f"ranges: unavailable: {rng['unavailable']}")
        return
    click.echo("ranges (low-high):")
    for row in doc["tiers"]:
        spans = [
            f"{h} {fmt(row[f'{k}_low'])}-{fmt(row[f'{k}_high'])}"
            for k, h in cols[3:]
            if f"{k}_low" in row
        ]
        click.echo(f"  {tier(row['host_tier_gib'])} GiB: " + ", ".join(spans))


def print_closed_form(doc: dict) -> None:
    click.echo(f"working set {doc['working_set_gib']:.2f} GiB per rank")
    for t, p in zip(doc["tiers_gib"], doc["pressure_ratio"], strict=True):
        click.echo(f"  tier {t:g} GiB: pressure {fmt(p)}")


def print_economics(doc: dict) -> None:
    for hw in doc["hardware"]:
        ratios = ", ".join(
            f"{p['prefix_tokens']}: {p['offload_benefit_ratio']:.3f}" for p in hw["prefix"]
        )
        click.echo(
            f"{hw['hardware']:>18}  compute/host byte {hw['compute_per_host_byte']:>9,.0f}  "
            f"benefit by prefix {ratios}"
        )


def print_sessions(doc: dict) -> None:
    click.echo(
        f"device holds {doc['device_sessions']} sessions, host {doc['host_sessions']}; "
        f"prices: host copy {doc['prices']['host_copy_s']:.2f} s, "
        f"recompute {doc['prices']['recompute_s']:.2f} s"
    )
    for r in doc["curve"]:
        noun = "session " if r["sessions"] == 1 else "sessions"
        click.echo(
            f"  {r['sessions']:>3} {noun}: device {r['device_hit_rate']:.2f}  host "
            f"{r['host_hit_rate']:.2f}  miss {r['miss_rate']:.2f}  mean turn {r['mean_turn_s']:.2f} s"
        )
