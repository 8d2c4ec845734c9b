"""The experiment file kept in the results folder: a changed file may not resume runs made by
the old one, but a folder with no run yet takes the corrected file."""

from __future__ import annotations

import pytest

from replay.errors import ConfigError, TraceError
from replay.sweep.config import load_experiment
from replay.sweep.runner import run_sweep

EXPERIMENT = """\
name = "kept"
repeats = 1
[trace]
{trace}
[run]
pool = 2
[engine]
kind = "sim"
device_kv_gib = 1.0
[matrix]
host_tier_gib = [0]
"""
SYNTH = 'synth = { preset = "swe-agent", tasks = 2, seed = 1, max_calls_per_task = 3 }'


def _write(tmp_path, trace: str):
    path = tmp_path / "kept.toml"
    path.write_text(EXPERIMENT.format(trace=trace))
    return load_experiment(path)


def test_a_sweep_stopped_before_its_first_run_takes_the_corrected_file(tmp_path):
    (tmp_path / "bad.jsonl").write_text("not a trace\n")
    bad = _write(tmp_path, 'path = "bad.jsonl"')
    with pytest.raises(TraceError):
        run_sweep(bad, results_root=tmp_path / "res", echo=lambda s: None)
    # kept only once the trace reads and the preflight passes: nothing ran from this file
    assert not (tmp_path / "res" / "kept" / "experiment.toml").exists()
    fixed = _write(tmp_path, SYNTH)
    result = run_sweep(fixed, results_root=tmp_path / "res", echo=lambda s: None)
    assert [o.status for o in result.outcomes] == ["ok"]
    kept = (tmp_path / "res" / "kept" / "experiment.toml").read_text()
    assert "synth" in kept and "bad.jsonl" not in kept


def test_a_changed_file_does_not_resume_the_old_files_runs(tmp_path):
    run_sweep(_write(tmp_path, SYNTH), results_root=tmp_path / "res", echo=lambda s: None)
    changed = _write(tmp_path, SYNTH.replace("seed = 1", "seed = 2"))
    with pytest.raises(ConfigError, match="differs from .* rerun with --force"):
        run_sweep(changed, results_root=tmp_path / "res", echo=lambda s: None)
    result = run_sweep(changed, results_root=tmp_path / "res", force=True, echo=lambda s: None)
    assert [o.status for o in result.outcomes] == ["ok"]


@pytest.mark.parametrize(
    "refused", ['path = "bad.jsonl"', SYNTH.replace("seed = 1", "seed = 1, scale = -1.0")]
)
def test_a_refused_force_keeps_the_file_the_runs_were_made_from(tmp_path, refused):
    """--force with a file whose trace does not load (or whose synth options are refused) wrote
    that file over the kept one first: the finished runs then could not be resumed with the
    file that made them, and report and calibrate read the wrong file."""
    (tmp_path / "bad.jsonl").write_text("not a trace\n")
    first = run_sweep(_write(tmp_path, SYNTH), results_root=tmp_path / "res", echo=lambda s: None)
    kept = tmp_path / "res" / "kept" / "experiment.toml"
    made_by = kept.read_bytes()
    with pytest.raises((TraceError, ConfigError)):
        run_sweep(_write(tmp_path, refused), results_root=tmp_path / "res", force=True,
                  echo=lambda s: None)  # fmt: skip
    assert kept.read_bytes() == made_by
    again = run_sweep(_write(tmp_path, SYNTH), results_root=tmp_path / "res", echo=lambda s: None)
    assert [o.status for o in first.outcomes] == ["ok"]
    assert [o.status for o in again.outcomes] == ["skipped"]  # resumed, nothing rerun
