"""Runs a paper experiment file on a reduced workload through the real sweep."""

from __future__ import annotations

from pathlib import Path

from replay.sweep.config import load_experiment
from replay.sweep.runner import run_sweep

ROOT = Path(__file__).resolve().parents[1]


def run_reduced(name: str, edits: tuple[tuple[str, str], ...], root: Path, runs: int) -> Path:
    """experiments/NAME.toml with each (old, new) text edit applied, swept under ROOT/results;
    every one of its `runs` runs must finish ok. Returns the results root."""
    text = (ROOT / "experiments" / f"{name}.toml").read_text()
    for old, new in edits:
        assert old in text, f"{name}.toml changed shape: {old!r} not found"
        text = text.replace(old, new)
    path = root / f"{name}.toml"
    path.write_text(text)
    result = run_sweep(load_experiment(path), results_root=root / "results", echo=lambda s: None)
    assert [o.status for o in result.outcomes] == ["ok"] * runs
    return root / "results"
