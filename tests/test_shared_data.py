"""Tests that need ../shared: skipped where it is absent, failed under CI=true."""

from __future__ import annotations

import pytest

from tests.shared_data import SHARED, require_shared


def test_missing_shared_data_skips_a_developer_run(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no-such-dir not present"):
        require_shared("no-such-dir")


@pytest.mark.parametrize("ci", ["true", "TRUE"])
def test_missing_shared_data_fails_under_ci(monkeypatch, ci):
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception, match="CI=true runs every test"):
        require_shared("traces", "no-such-dir")


def test_present_shared_data_lets_the_test_run(monkeypatch, tmp_path):
    monkeypatch.setenv("CI", "true")
    monkeypatch.setattr("tests.shared_data.SHARED", tmp_path)
    (tmp_path / "traces").mkdir()
    require_shared("traces")  # neither skips nor fails
    assert SHARED.name == "shared"
