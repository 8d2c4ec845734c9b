"""What `replay run` prints when a run ends: the summary lines, or one JSON object with --json."""

from __future__ import annotations

import sys

import click
import orjson

__all__ = ["print_summary", "latency_lines"]


def print_summary(summary: dict, json_out: bool) -> None:
    if json_out:
        sys.stdout.write(orjson.dumps(summary, option=orjson.OPT_SERIALIZE_NUMPY).decode() + "\n")
        return
    s = summary

    def ms(v):
        return "-" if v is None else f"{v * 1e3:.1f} ms"

    def n(v):  # a count the engine or the calls did not give
        return "-" if v is None else v

    click.echo(f"status       {s['status']}" + (f" ({s['reason']})" if s.get("reason") else ""))
    click.echo(
        f"calls        {s['calls']} of {s['calls_total']}  errors {s['errors']}  skipped {s['calls_skipped']}"
    )
    click.echo("makespan     " + ("-" if s["makespan_s"] is None else f"{s['makespan_s']:.2f} s"))
    if s.get("study_makespan_s") is not None:  # first gap to last tail gap (EfficientAgent)
        click.echo(f"  study def  {s['study_makespan_s']:.2f} s (first gap to last tail gap)")
    click.echo(
        f"tokens       prompt {n(s['prompt_tokens'])}  output {n(s['output_tokens'])}  "
        f"cached {n(s['cached_tokens'])}"
    )
    click.echo(
        f"ttft         p50 {ms(s['ttft_p50_s'])}  p90 {ms(s['ttft_p90_s'])}  p99 {ms(s['ttft_p99_s'])}"
    )
    jct = s["jct_p50_s"], s["jct_p90_s"]
    click.echo(
        "task jct     " + ("-" if jct[0] is None else f"p50 {jct[0]:.2f} s  p90 {jct[1]:.2f} s")
    )
    click.echo(
        f"mismatches   prompt {s['prompt_mismatches']}  completion {s['completion_mismatches']}"
    )
    click.echo(
        f"send drift   p50 {ms(s['drift_p50_s'])}  p99 {ms(s['drift_p99_s'])}  max {ms(s['drift_max_s'])}"
    )
    if s.get("error_kinds"):
        click.echo("errors by    " + "  ".join(f"{k} {v}" for k, v in s["error_kinds"].items()))
    for line in latency_lines(s):
        click.echo(line)


def latency_lines(s: dict) -> list[str]:
    """The latency table (ms, p1..p99 per metric) and goodput, as `replay run` prints them."""
    from replay.driver.latency import LATENCY_METRICS, PERCENTILES

    table = s.get("latency_percentiles") or {}

    def cell(row: dict, q: int) -> str:
        v = row.get(f"p{q}")
        return "-" if v is None else format(v * 1e3, ".1f")

    cells = {m: [cell(table.get(m) or {}, q) for q in PERCENTILES] for m in LATENCY_METRICS}
    # wide enough for the widest value plus a space: an overloaded server's 1,000 s is 7 digits
    w = max([8, *(len(c) for row in cells.values() for c in row)]) + 1
    lines = ["latency ms   " + "".join(f"{'p' + str(q):>{w}}" for q in PERCENTILES)]
    for metric in LATENCY_METRICS:
        lines.append(
            f"  {metric.removesuffix('_s'):<11}" + "".join(f"{c:>{w}}" for c in cells[metric])
        )
    if s.get("slo_s"):
        slo = ", ".join(f"{k.removesuffix('_s')} <= {v * 1e3:g} ms" for k, v in s["slo_s"].items())
        frac = s["goodput_fraction"]
        per_s = s["goodput_per_s"]
        lines.append(
            f"goodput      {s['goodput_calls']} of {s['calls']} calls"
            + ("" if frac is None else f" ({frac:.1%})")
            + ("" if per_s is None else f", {per_s:.2f}/s")
            + f" met {slo}"
        )
    return lines
