"""docs/paper.md: our paper-* runs beside the EfficientAgent study's published numbers.

`write_paper(results_root, out)` reads whichever of `results_root/paper-h20`, `paper-pool8`,
`paper-hardware`, `paper-folding`, `paper-kappa`, `paper-prefix`, `paper-extensions` and
`paper-holdout/holdout.json` exist, sets every published claim (`claims.CLAIMS`) beside our value
(mean ± 95% t half-width over repeats, or a Welch interval on a difference), gives a verdict per
claim (`verdict`), and says in words what reproduces, what does not, and why. Statistics come
from `replay.analysis`; nothing is refitted.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson

from replay.analysis.load import Results, load_results
from replay.errors import ReplayError
from replay.studies.efficientagent.claims import STUDY
from replay.studies.efficientagent.runs import PAPER_EXPERIMENTS, PaperRun
from replay.studies.efficientagent.verdict import paper_rows
from replay.trace.model import Trace

__all__ = ["reappearing_fraction", "trace_facts", "load_paper_runs", "build_paper", "write_paper"]

# -- trace facts ------------------------------------------------------------------------------


def reappearing_fraction(trace: Trace) -> float | None:
    """Share of the tokens a call adds to its context (new prompt tokens + output) that the task's
    next call keeps in its prompt: sum over calls of max(0, min(keep[i+1], L[i]) - keep[i]) /
    sum of (L[i] - keep[i]), with L[i] = prompt + output length and keep the kept prefix. A task's
    last call has no next call and counts 0. ids traces only (None for block traces)."""
    if trace.header.tokens != "ids":
        return None
    added = kept = 0
    for calls in trace.tasks.values():
        for i, c in enumerate(calls):
            start = c.keep if i > 0 else 0
            end = c.prompt_len + c.output_len
            added += max(0, end - start)
            if i + 1 < len(calls):
                kept += max(0, min(calls[i + 1].keep, end) - start)
    return kept / added if added else None


def trace_facts(trace: Trace) -> dict[str, float | None]:
    """The workload numbers the study reports, measured on `trace`."""
    from replay.trace.stats import trace_stats

    st = trace_stats(trace)
    gaps = [c.gap_s for calls in trace.tasks.values() for c in calls[1:]]
    return {
        "own_gap_median_s": float(np.median(gaps)) if gaps else None,
        "calls": st.calls,
        "prompt_tokens": st.prompt_tokens,
        "max_context": st.prompt_len_max,
        "reuse": st.reuse_fraction,
        "reappears": reappearing_fraction(trace),
    }


def _experiment_trace(results: Results) -> Trace | None:
    """The trace the experiment ran, rebuilt from its kept experiment.toml (None if impossible)."""
    from replay.sweep.config import load_experiment
    from replay.sweep.prepare import load_trace

    toml = results.root / "experiment.toml"
    if not toml.is_file():
        return None
    try:
        return load_trace(load_experiment(toml))
    except (ReplayError, OSError):
        return None


# -- the page ---------------------------------------------------------------------------------


def _load(root: Path, name: str, tier_scale: float = 1.0) -> PaperRun | None:
    d = root / name
    if not d.is_dir():
        return None
    try:
        run = PaperRun(load_results(d), tier_scale)
    except ReplayError:
        return None
    return run if len(run.ok) else None


def missing_experiments(results_root: str | Path) -> list[str]:
    """The paper-* experiments with no summary under `results_root` (the page scores them as not
    run)."""
    root = Path(results_root)
    names = (*PAPER_EXPERIMENTS, "paper-extensions")
    return [n for n in names if not (root / n / "summary.parquet").is_file()]


def load_paper_runs(
    results_root: str | Path, tier_scale: float = 1.0
) -> dict[str, PaperRun | None]:
    """The paper-* experiments found under `results_root` (None for those not run)."""
    root = Path(results_root)
    return {
        name: _load(root, name, tier_scale) for name in (*PAPER_EXPERIMENTS, "paper-extensions")
    }


def build_paper(
    results_root: str | Path,
    *,
    facts: dict[str, float | None] | None = None,
    tier_scale: float = 1.0,
) -> str:
    """The markdown of docs/paper.md from the paper-* results under `results_root`."""
    from replay.studies.efficientagent.text import page

    root = Path(results_root)
    runs = load_paper_runs(root, tier_scale)
    if facts is None and runs["paper-h20"] is not None:
        trace = _experiment_trace(runs["paper-h20"].results)
        facts = trace_facts(trace) if trace is not None else None
    holdout = None
    hp = root / "paper-holdout" / "holdout.json"
    if hp.is_file():
        holdout = orjson.loads(hp.read_bytes())
    return page(paper_rows(runs, facts), runs, holdout, STUDY)


def write_paper(results_root: str | Path, out: str | Path = "docs/paper.md") -> Path:
    """Write docs/paper.md (atomically) from the paper-* results under `results_root`."""
    text = build_paper(results_root)
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path
