"""The words and tables of docs/paper.md (`page.build_paper` computes, this writes; the fixed
prose is in `prose`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from replay.analysis.aggregate import describe
from replay.analysis.words import fmt_interval, fmt_num
from replay.report.markdown import md_table
from replay.studies.efficientagent.prose import HOW, ROLES, SECTIONS, SETUP, WHY
from replay.studies.efficientagent.rule import RULE

__all__ = ["page", "score_line"]


def _claims(rows: Sequence[Any]) -> list[str]:
    lines: list[str] = []
    for role, role_title in ROLES:
        mine = [r for r in rows if r.role == role]
        if not mine:
            continue
        lines += [f"## {role_title}", ""]
        for section, title in SECTIONS:
            here = [r for r in mine if r.section == section]
            if not here:
                continue
            lines += [f"### {title}", ""]
            lines += md_table(
                ["claim", "study", "where", "ours", "verdict", "note"],
                [[r.claim, r.published, r.source, r.ours, r.verdict, r.note] for r in here],
            )
    return lines


def score_line(rows: Sequence[Any]) -> str:
    """The score: outcomes only."""
    out = [r for r in rows if r.role == "outcome"]
    n = Counter(r.verdict for r in out)
    return (
        f"**Score (outcomes only, {len(out)} claims):** {n.get('yes', 0)} reproduce, "
        f"{n.get('direction', 0)} hold in direction only, {n.get('no', 0)} do not, "
        f"{n.get('not run', 0)} not run."
    )


def _words(rows: Sequence[Any]) -> list[str]:
    lines = [score_line(rows), ""]
    out = [r for r in rows if r.role == "outcome"]
    for verdict, title in (
        ("yes", "Reproduces"),
        ("direction", "Holds in direction, number differs"),
        ("no", "Does not reproduce"),
        ("not run", "Not run"),
    ):
        here = [r for r in out if r.verdict == verdict]
        if here:
            lines += [f"**{title}:** " + "; ".join(f"{r.claim} ({r.ours})" for r in here) + ".", ""]
    return lines


def _chunk_table(h20: Any, c256: Any) -> list[str]:
    """Fixed and conditioned against plain offload at 5 and 40 GiB, 1,024 beside 256 tokens."""
    head = ["### Chunk size: 1,024 tokens (the study's) beside 256", ""]
    if h20 is None:
        return []
    if c256 is None:
        return [*head, "Not run yet: `replay sweep experiments/paper-chunk256.toml`.", ""]
    rows = []
    for label, run in (("1,024", h20), ("256", c256)):
        for tier in (5, 40):
            plain = run.values("computed_prefill_tokens", host_tier_gib=tier, admission="all")
            for policy in ("fixed", "conditioned"):
                v = run.values("computed_prefill_tokens", host_tier_gib=tier, admission=policy)
                w = run.values("host_write_tokens", host_tier_gib=tier, admission=policy)
                if not len(v) or not len(plain):
                    continue
                rel = v.mean() / plain.mean()
                rows.append(
                    [label, f"{tier:g}", policy, fmt_num(plain.mean()), fmt_num(v.mean()),
                     f"{(rel - 1) * 100:+.1f}% ({rel:.2f}x)", fmt_num(w.mean())]
                )  # fmt: skip
    return [
        *head,
        "kappa counts chunks: at 256 tokens a task's first call (~26 chunks) already exceeds "
        "kappa = 8, so `fixed` writes (almost) nothing and behaves like no tier.",
        "",
        *md_table(
            ["chunk tokens", "tier GiB", "admission", "plain: computed prefill",
             "policy: computed prefill", "vs plain", "policy: writes"],
            rows,
        ),
    ]  # fmt: skip


def _h20_table(run: Any) -> list[str]:
    """Computed prefill, restores, writes and makespan per tier and admission (means)."""
    if run is None:
        return []
    ok = run.ok
    policies = [p for p in ("all", "fixed", "conditioned") if p in set(ok.get("admission", []))]
    rows = []
    for tier in sorted({float(t) for t in ok["host_tier_gib"]}):
        for policy in policies:
            sel = ok[(ok["host_tier_gib"].astype(float) == tier) & (ok["admission"] == policy)]
            if sel.empty:
                continue
            row: list[Any] = [f"{tier:g}", policy]
            for m in (
                "computed_prefill_tokens",
                "host_restore_tokens",
                "host_write_tokens",
                "makespan_s",
            ):
                s = describe(sel[m].tolist())
                row.append(fmt_interval(s.mean, s.half_width, s.n))
            rel = sel["relative_makespan"].mean() if "relative_makespan" in sel else np.nan
            row.append(fmt_num(rel))
            rows.append(row)
    return [
        "### paper-h20, every point",
        "",
        *md_table(
            ["tier GiB", "admission", "computed prefill", "restores", "writes", "makespan s",
             "vs no tier"],
            rows,
        ),
    ]  # fmt: skip


def _extensions(run: Any) -> list[str]:
    head = ["## Comparisons the study did not run", ""]
    if run is None:
        return [
            *head,
            "Not run yet: `replay sweep experiments/paper-extensions.toml` (write-rate limiter "
            "`rate`, TTL pinning `ttl`, `selective` write policy beside plain write-through).",
            "",
        ]
    ok = run.ok
    keys = [k for k in run.params if k != "host_tier_gib"]
    rows = []
    for tier in sorted({float(t) for t in ok["host_tier_gib"]}):
        at = ok[ok["host_tier_gib"].astype(float) == tier]
        base = at
        for k, v in (("admission", "all"), ("write_policy", "write-through")):
            if k in base.columns:
                base = base[base[k] == v]
        for _, grp in at.groupby(keys, sort=True) if keys else [((), at)]:
            first = grp.iloc[0]
            label = ", ".join(f"{k}={first[k]}" for k in keys)
            cp = grp["computed_prefill_tokens"].mean()
            ms = grp["makespan_s"].mean()
            b_cp = base["computed_prefill_tokens"].mean() if len(base) else np.nan
            b_ms = base["makespan_s"].mean() if len(base) else np.nan
            rows.append(
                [
                    f"{tier:g}",
                    label,
                    fmt_num(cp),
                    f"{(cp / b_cp - 1) * 100:+.1f}%" if b_cp else "-",
                    fmt_num(grp["host_write_tokens"].mean()),
                    fmt_num(ms),
                    f"{(ms / b_ms - 1) * 100:+.1f}%" if b_ms else "-",
                ]
            )
    base_label = ", ".join(
        f"{k}={v}"
        for k, v in (("admission", "all"), ("write_policy", "write-through"))
        if k in keys
    )
    ranges: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        if r[3] != "-" and r[6] != "-" and r[1] != base_label:
            ranges.setdefault(r[1], []).append((float(r[3][:-1]), float(r[6][:-1])))
    words = [
        f"- {label}: computed prefill {min(c for c, _ in v):+.0f}% to {max(c for c, _ in v):+.0f}%, "
        f"makespan {min(m for _, m in v):+.0f}% to {max(m for _, m in v):+.0f}% across tiers"
        for label, v in ranges.items()
    ]
    return [
        *head,
        "Same workload, pool and device as paper-h20; each row against plain offload "
        "(admission `all`, write-through) at the same tier. Against plain offload:",
        "",
        *words,
        "",
        "`ttl` pins a finished call's device blocks until its task returns, which saves recompute "
        "but starves a 6 GiB device: in the simulator pins yield to decode growth, not to waiting "
        "prefills, so requests wait for pins to expire and the makespan grows. `selective` "
        "writes a chunk only after its second lookup, so above the working set every first refill "
        "is lost. The `rate` limiter trims the refill churn under pressure and changes nothing "
        "where writes are few.",
        "",
        *md_table(
            ["tier GiB", "policy", "computed prefill", "vs plain", "writes", "makespan s",
             "vs plain"],
            rows,
        ),
    ]  # fmt: skip


def _holdout(doc: Mapping[str, Any] | None) -> list[str]:
    head = ["## Held-out check of the working-set model", ""]
    if not doc:
        return [*head, "Not run yet: `python -m replay.studies.efficientagent.holdout`.", ""]
    lines = [*head, str(doc.get("summary", "")), ""]
    if doc.get("setup"):  # older files have none
        lines += [str(doc["setup"]), ""]
    rows = [
        [
            r["set"],
            r["pool"],
            f"{r['host_tier_gib']:g}",
            fmt_num(r["measured"]),
            fmt_num(r["predicted_raw"]),
            f"{r['error_raw'] * 100:+.1f}%" if r.get("error_raw") is not None else "-",
            fmt_num(r["predicted"]),
            f"{r['error'] * 100:+.1f}%" if r.get("error") is not None else "-",
        ]
        for r in doc.get("rows", [])
    ]
    lines += md_table(
        ["tasks", "pool", "tier GiB", "measured computed prefill", "model (nominal device)",
         "error", "model (calibrated device)", "error"],
        rows,
    )  # fmt: skip
    return lines


def _why(runs: Mapping[str, Any]) -> str:
    """The prose of why numbers differ, with the figures it quotes measured on these runs."""
    h20, prefix = runs.get("paper-h20"), runs.get("paper-prefix")
    fields = dict.fromkeys(("wait_10", "wait_20", "prefix_hits", "prefix_speedup"), "(not run)")
    fields["restore_error_10"] = "its restore error there is in the row below"
    if h20 is not None:
        for tier in (10, 20):
            w = h20.first_token_waits(host_tier_gib=tier, admission="all")
            if len(w):
                fields[f"wait_{tier}"] = f"{np.percentile(w, 90):.1f} s"
        pred = h20.prediction("host_restore_tokens", 10, admission="all")
        meas = h20.values("host_restore_tokens", host_tier_gib=10, admission="all")
        if pred is not None and len(meas) and meas.mean() > 0:
            err = pred / meas.mean() - 1
            fields["restore_error_10"] = (
                f"{'under' if err < 0 else 'over'}-predicts restores by {abs(err):.1%}"
            )
    if prefix is not None:
        hits = prefix.values("device_hit_tokens", enable_prefix_caching=True)
        prompt = prefix.values("prompt_tokens", enable_prefix_caching=True)
        on = prefix.values("makespan_s", enable_prefix_caching=True)
        off = prefix.values("makespan_s", enable_prefix_caching=False)
        if len(hits) and len(prompt) == len(hits) and prompt.sum() > 0:
            fields["prefix_hits"] = f"{hits.sum() / prompt.sum():.1%}"
        if len(on) and len(off):
            fields["prefix_speedup"] = f"{off.mean() / on.mean():.2f}x"
    return WHY.format(**fields)


def page(
    rows: Sequence[Any], runs: Mapping[str, Any], holdout: Mapping[str, Any] | None, study: str
) -> str:
    """The whole docs/paper.md."""
    lines = [
        "# The EfficientAgent study, reproduced in simulation",
        "",
        "<!-- generated by `replay report results/paper-h20 --paper` "
        "(replay.studies.efficientagent); edit replay/studies/efficientagent/text.py and "
        "prose.py, not this file -->",
        "",
        RULE,
        "",
        f"Published numbers: {study}. Ours: the reference simulator (`replay.sim`) on the "
        "paper-scale synthetic SWE-agent workload, through the same closed-loop agent pool a real "
        "run uses. Each claim is set beside our value (mean ± 95% t half-width over repeats, or "
        "the relative difference between two points with its Welch interval and verdict).",
        "",
        HOW,
        "",
        SETUP,
        "",
        "## What reproduces",
        "",
        *_words(rows),
        _why(runs),
        "",
        *_claims(rows),
        "## Every point",
        "",
        *_chunk_table(runs.get("paper-h20"), runs.get("paper-chunk256")),
        *_h20_table(runs.get("paper-h20")),
        *_extensions(runs.get("paper-extensions")),
        *_holdout(holdout),
    ]
    return "\n".join(lines).rstrip() + "\n"
