"""`replay report MEASURED --vs SIMULATED`: the "Simulated vs measured" section pairs points by name
and states each quantity's signed error against the measured mean, and a real sweep given as the
simulated one is refused with one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from replay.analysis.load import load_results
from replay.errors import ConfigError
from replay.report.analyse import analyse
from replay.report.simulated import check_simulated, simulated_section
from tests.report_results_builder import write_run
from tests.subprocess_helpers import replay_cli

TIER = "host_tier_gib"


def _sweep(root: Path, engine: str, points: dict[float, list[tuple[float, int, int]]]) -> Path:
    """Runs with (makespan_s, computed prefill, device hits) per repeat at each tier size."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "experiment.toml").write_text(f'name = "{root.name}"\nrepeats = 2\n')
    for tier, runs in points.items():
        for r, (makespan, prefill, hits) in enumerate(runs):
            summary = {
                "makespan_s": makespan,
                "ttft_p50_s": makespan / 100,
                "calls": 10,
                "prompt_tokens": 10_000,
                "computed_prefill_tokens": prefill,
                "device_hit_tokens": hits,
                "host_restore_tokens": 10_000 - prefill - hits,
            }
            write_run(root, {TIER: tier}, r, summary=summary, engine=engine)
    return root


@pytest.fixture
def pair(tmp_path) -> tuple[Path, Path]:
    measured = _sweep(
        tmp_path / "measured",
        "llamacpp",
        {
            0: [(10.0, 9_000, 1_000), (12.0, 9_000, 1_000)],
            4: [(8.0, 5_000, 1_000), (8.0, 5_400, 1_000)],
        },
    )
    simulated = _sweep(
        tmp_path / "simulated",
        "sim",
        {0: [(12.1, 9_900, 1_500)], 4: [(7.6, 5_200, 1_000)], 16: [(6.0, 3_000, 1_000)]},
    )
    return measured, simulated


def _rows(lines: list[str]) -> dict[tuple[str, str], list[str]]:
    out = {}
    for line in lines:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| host_tier_gib="):
            out[(cells[0], cells[1])] = cells
    return out


def test_errors_are_signed_against_the_measured_mean(pair):
    measured, simulated = pair
    m, s = analyse(load_results(measured)), analyse(load_results(simulated))
    lines = simulated_section(m.runs, s.runs, simulated)
    rows = _rows(lines)
    # makespan at 0: simulated 12.1 against the mean of 10 and 12 (11): +10.0%
    assert rows[("host_tier_gib=0", "makespan")][2:6] == [
        "12.1",
        "11 [-1.706–23.71]",
        "2 / 1",
        "+10.0%",
    ]
    assert rows[("host_tier_gib=0", "makespan")][6] == "yes"
    # computed prefill at 4: 5,200 against 5,200: exact; at 0: 9,900 against 9,000: +10.0%
    assert rows[("host_tier_gib=4", "computed prefill")][5] == "+0.0%"
    assert rows[("host_tier_gib=0", "computed prefill")][5] == "+10.0%"
    # identical measured repeats: an interval of one value, which 9,900 is not inside
    assert rows[("host_tier_gib=0", "computed prefill")][6] == "no"
    # a fraction's error is the difference: 0.15 - 0.10
    assert rows[("host_tier_gib=0", "device hit fraction")][5] == "+0.050"
    text = "\n".join(lines)
    assert "Simulated, not measured: `host_tier_gib=16`." in text
    assert "Measured, not simulated" not in text


def test_no_common_point_says_so(pair, tmp_path):
    measured, _ = pair
    other = _sweep(tmp_path / "other", "sim", {32: [(5.0, 1_000, 0)]})
    m, s = analyse(load_results(measured)), analyse(load_results(other))
    text = "\n".join(simulated_section(m.runs, s.runs, other))
    assert "No point of the simulated sweep has the name of a measured point." in text
    assert "Measured, not simulated: `host_tier_gib=0`, `host_tier_gib=4`." in text


def test_a_real_sweep_given_as_the_simulated_one_is_refused(pair):
    measured, simulated = pair
    check_simulated(load_results(simulated))
    with pytest.raises(ConfigError, match="engine llamacpp, not the simulator"):
        check_simulated(load_results(measured))


def test_cli_vs_adds_the_section_and_without_it_there_is_none(pair):
    measured, simulated = pair
    done = replay_cli("report", str(measured), "--no-figures")
    assert done.returncode == 0, done.stderr
    assert "## Simulated vs measured" not in (measured / "report.md").read_text()
    done = replay_cli("report", str(measured), "--no-figures", "--vs", str(simulated))
    assert done.returncode == 0, done.stderr
    text = (measured / "report.md").read_text()
    section = text[text.index("## Simulated vs measured\n") : text.index("## Figures\n")]
    assert "| host_tier_gib=4 | makespan | 7.6 | 8 [8–8] | 2 / 1 | -5.0% | no |" in section


def test_cli_vs_a_real_sweep_or_a_missing_directory_is_one_line_and_exit_2(pair, tmp_path):
    measured, _ = pair
    before = (measured / "report.md").exists()
    for vs, why in (
        (measured, "not the simulator"),
        (tmp_path / "nope", "no such results directory"),
    ):
        done = replay_cli("report", str(measured), "--no-figures", "--vs", str(vs))
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("replay: ") and "Traceback" not in done.stderr
        assert why in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert (measured / "report.md").exists() == before  # nothing written


def test_a_twin_of_another_trace_is_said(tmp_path):
    """The simulated sweep replayed another trace (a different synth seed): its errors of -25% to
    +466% were printed as the simulator's, with no word."""
    summary = {"makespan_s": 10.0, "calls": 10, "prompt_tokens": 100, "computed_prefill_tokens": 90}

    def sweep(root: Path, engine: str, sha: str) -> Path:
        root.mkdir(parents=True)
        (root / "experiment.toml").write_text(f'name = "{root.name}"\n')
        write_run(root, {TIER: 0}, 0, summary=summary, engine=engine,
                  provenance={"trace_sha256": sha, "engine": engine})  # fmt: skip
        return root

    measured = sweep(tmp_path / "m", "llamacpp", "a" * 64)
    same = sweep(tmp_path / "s1", "sim", "a" * 64)
    other = sweep(tmp_path / "s2", "sim", "b" * 64)
    m = analyse(load_results(measured))
    assert "different traces" not in "\n".join(
        simulated_section(m.runs, analyse(load_results(same)).runs, same)
    )
    text = "\n".join(simulated_section(m.runs, analyse(load_results(other)).runs, other))
    assert "**The two sweeps replayed different traces** (sha256 aaaaaaaaaaaa measured" in text


def test_quantities_the_measured_engine_does_not_report_are_named(tmp_path):
    """llama.cpp reports no restores: the measured column was `-` with `0 / 1` runs, which read
    as runs missing; the section now names what the engine does not count."""
    summary = {"makespan_s": 10.0, "calls": 10, "prompt_tokens": 100, "computed_prefill_tokens": 90}
    measured = tmp_path / "m"
    simulated = tmp_path / "s"
    for root, engine, extra in ((measured, "llamacpp", {"host_restore_tokens": None}),
                                (simulated, "sim", {"host_restore_tokens": 5})):  # fmt: skip
        root.mkdir()
        (root / "experiment.toml").write_text(f'name = "{root.name}"\n')
        write_run(root, {TIER: 0}, 0, summary={**summary, **extra}, engine=engine)
    m, s = analyse(load_results(measured)), analyse(load_results(simulated))
    text = "\n".join(simulated_section(m.runs, s.runs, simulated))
    assert "Not reported by the measured runs" in text and "host restores" in text
