"""Live progress: the counts it shows, the plain and rich renderings, the sweep's ETA."""

from __future__ import annotations

import io
import sys

import pytest

from replay.driver import progress
from replay.driver.pool import PoolStats
from replay.driver.progress import LiveCounts, ProgressBar, SweepEta, format_eta


def _row(prompt, out, cached, restored=0, status="ok"):
    return {
        "prompt_tokens": prompt, "max_tokens": out, "completion_tokens": out,
        "cached_tokens": cached, "host_restore_tokens": restored, "status": status,
    }  # fmt: skip


def test_counts_hit_fraction_and_eta_from_recorded_work():
    c = LiveCounts(work_total_tokens=1000)
    rows = [_row(200, 50, 100, 20), _row(100, 50, 0, status="error")]
    c.add(rows)
    assert c.hit_fraction == pytest.approx(0.5)  # failed calls count as work, not as hits
    assert c.restored_tokens == 20 and c.work_done == 400
    assert c.eta_s(elapsed_s=8.0) == pytest.approx(12.0)  # 600 tokens left at 50 tokens/s
    rows.append(_row(100, 0, 100))
    c.add(rows)  # only the new row is taken in
    assert c.prompt_tokens == 300 and c.hit_fraction == pytest.approx(200 / 300)
    assert format_eta(3725) == "1:02:05" and format_eta(65) == "1:05" and format_eta(None) == "?"


def test_plain_lines_when_not_a_terminal(monkeypatch, capsys):
    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 0.0)
    stats = PoolStats(total=4, done=2, errors=1)
    bar = ProgressBar(stats, [_row(100, 10, 40)], plain=True)
    bar.close()
    err = capsys.readouterr().err
    assert err.startswith("replay: calls 2/4  ETA ?  inflight 0  errors 1")
    assert "hit 40.0%" in err and "ETA ?" in err


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_rich_bar_on_a_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    fake = _Tty()
    monkeypatch.setattr(sys, "stderr", fake)
    stats = PoolStats(total=10, done=3)
    bar = ProgressBar(stats, [_row(100, 10, 90, 5)])
    assert bar._bar is not None  # rich, not plain lines
    stats.done = 4
    bar.close()
    text = fake.getvalue()
    assert "4/10" in text and "hit 90.0%" in text and "restored 5 tok" in text


def test_an_80_column_terminal_keeps_the_count_and_the_eta(monkeypatch):
    """rich gave the free text the width first: at 80 columns the bar, done/total and the ETA
    (last on the line) were gone."""
    monkeypatch.setenv("COLUMNS", "80")
    fake = _Tty()
    monkeypatch.setattr(sys, "stderr", fake)
    stats = PoolStats(total=441, done=17)
    bar = ProgressBar(stats, [_row(100, 10, 90, 5)])
    bar.close()
    last = [ln for ln in fake.getvalue().splitlines() if "calls" in ln][-1]
    assert "17/441" in last and "ETA" in last and "━" in last


def test_sweep_eta_counts_runs_that_ran():
    eta = SweepEta(4)
    eta.done(10.0, skipped=True)
    assert str(eta) == ""  # nothing ran yet: no guess
    eta.done(30.0)
    assert eta.eta_s() == pytest.approx(60.0) and "sweep ETA 1:00" in str(eta)


def test_virtual_run_shows_simulated_time_and_keeps_its_records(monkeypatch, tmp_path, capsys):
    """On the virtual loop the bar redraws as calls end, in wall time, and shows the simulated
    clock; it adds nothing to the loop, so the records equal a run without progress."""
    import pandas as pd

    from replay.driver.options import RunOptions
    from replay.sim.options import SimConfig
    from replay.trace.synth import synth
    from tests.sim_helpers import replay_on_sim

    trace = synth("swe-agent", tasks=4, seed=3, scale=0.05, max_calls_per_task=5)
    cfg = SimConfig(device_kv_gib=0.05)
    monkeypatch.setattr(progress, "_REFRESH_S", 0.0)
    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 0.0)
    frames = []
    for shown in (False, True):
        opt = RunOptions(pool=2, forcing=True, progress=shown, progress_plain=True)
        replay_on_sim(trace, cfg, opt, tmp_path / str(shown))
        frames.append(pd.read_parquet(tmp_path / str(shown) / "calls.parquet"))
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("replay: calls")]
    assert len(lines) >= len(trace)  # a line each call at a zero refresh
    last_sim_s = float(lines[-1].split("sim ")[1].split(" s")[0].replace(",", ""))
    assert last_sim_s == pytest.approx(frames[1]["t_end"].max(), abs=1.0)
    assert "(sim)" in lines[-1]
    pd.testing.assert_frame_equal(frames[0], frames[1])
