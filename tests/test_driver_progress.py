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
    assert err.startswith("replay: calls 2/4  inflight 0  errors 1")
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


def test_sweep_eta_counts_runs_that_ran():
    eta = SweepEta(4)
    eta.done(10.0, skipped=True)
    assert str(eta) == ""  # nothing ran yet: no guess
    eta.done(30.0)
    assert eta.eta_s() == pytest.approx(60.0) and "sweep ETA 1:00" in str(eta)
