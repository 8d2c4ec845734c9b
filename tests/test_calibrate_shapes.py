"""What calibrate fits with: the llama.cpp personality's restores as it charges them, fit points
of one configuration, and runs of the trace the experiment names now."""

from __future__ import annotations

import dataclasses

import pytest

from replay.sim.fitted_cost import costs_toml, load_costs
from replay.trace.io import write_trace
from replay.trace.synth import synth
from tests.test_calibrate import EXPERIMENT, TRUE, _run

WITH_CHUNK = dataclasses.replace(TRUE, restore_s_per_chunk=2e-4)


def _sweep(tmp_path, capsys, text: str) -> None:
    exp = tmp_path / "calib.toml"
    exp.write_text(text)
    code, _, err = _run(["sweep", str(exp)], capsys)
    assert code == 0, err


def test_the_llamacpp_personality_restore_cost_comes_back_per_restore(
    tmp_path, capsys, monkeypatch
):
    """The personality restores a whole prompt in one copy and charges the per-chunk cost once;
    the fit charged it per 16 tokens and gave 0.050 ms a chunk back for 0.2 ms a restore."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "true.toml").write_text(costs_toml(WITH_CHUNK))
    _sweep(tmp_path, capsys, EXPERIMENT.format(costs=tmp_path / "true.toml"))
    argv = ["calibrate", "results/calib", "--fit", "host_tier_gib=0", "--fit"]
    code, _, err = _run([*argv, "host_tier_gib=0.015625", "-o", "fitted.toml"], capsys)
    assert code == 0, err
    fitted = load_costs(tmp_path / "fitted.toml")
    assert fitted.restore_s_per_chunk == pytest.approx(2e-4, rel=1e-3)
    assert fitted.restore_s_per_token == pytest.approx(TRUE.restore_s_per_token, rel=1e-3)


def test_fit_points_of_different_seats_are_refused(tmp_path, capsys, monkeypatch):
    """One fit models every fitted run with one seat count: points with 1 and 2 seats gave costs
    that depended on the order of the --fit flags."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "true.toml").write_text(costs_toml(TRUE))
    text = EXPERIMENT.format(costs=tmp_path / "true.toml").replace("max_num_seqs = 1\n", "")
    text = text.replace(
        "host_tier_gib = [0, 0.00390625, 0.0078125, 0.015625]",
        "host_tier_gib = [0, 0.015625]\nmax_num_seqs = [1, 2]",
    )
    _sweep(tmp_path, capsys, text)
    code, _, err = _run(
        ["calibrate", "results/calib", "--fit", "host_tier_gib=0,max_num_seqs=1", "--fit",
         "host_tier_gib=0,max_num_seqs=2", "-o", "fitted.toml"], capsys,
    )  # fmt: skip
    assert code == 2 and "--fit: the fit points differ in how the engine serves" in err
    assert "1 seats" in err and "2 seats" in err and not (tmp_path / "fitted.toml").exists()


def test_runs_of_another_trace_are_refused(tmp_path, capsys, monkeypatch):
    """The experiment's trace file was replaced after the sweep: calibrate fitted the old runs
    and compared them with the new trace's simulation, without a word."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "true.toml").write_text(costs_toml(TRUE))
    trace = tmp_path / "t.jsonl.gz"
    kw = dict(tasks=6, vocab_size=8192, scale=0.06, max_calls_per_task=6, shared_head_tokens=0)
    write_trace(synth("swe-agent", seed=1, **kw), trace)  # type: ignore[arg-type]
    text = EXPERIMENT.format(costs=tmp_path / "true.toml")
    start = text.index("synth = {")
    text = text[:start] + f'path = "{trace}"' + text[text.index("\n", start) :]
    _sweep(tmp_path, capsys, text)
    write_trace(synth("swe-agent", seed=2, **kw), trace)  # type: ignore[arg-type]
    code, _, err = _run(
        ["calibrate", "results/calib", "--fit", "host_tier_gib=0", "-o", "fitted.toml"], capsys
    )
    assert code == 2 and "replayed another trace" in err and "run the sweep again" in err
