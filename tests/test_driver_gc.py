"""The run's GC policy (`quiet_gc`, `freeze_setup`): no full collection walks the process loaded
before a run unless a run ended since the last full one, garbage made before the run is still
collected, and a run's set-up does not outlive it in a process that runs one replay after
another. Real runs on the simulator; real reference cycles, seen through weakref callbacks.
Automatic collections are switched off while each test runs, so every collection seen is one
the run asked for."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from replay.driver.options import RunOptions
from replay.driver.run import run_replay
from replay.sim.options import SimConfig
from replay.sim.transport import SimTransport
from tests.servers import make_trace

TRACE = make_trace({f"t{i}": [{"gap": 0.5}] * 3 for i in range(3)})


@pytest.fixture
def no_auto_gc() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class _Node:
    other: _Node | None = None


def _cycle(freed: list[str], name: str) -> _Node:
    """Two objects referring to each other (only the cyclic GC frees them); `name` goes into
    `freed` when they are."""
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    weakref.finalize(a, freed.append, name)
    return a


def _sim_run(tmp_path, on_factory=lambda: None) -> dict:
    def factory() -> SimTransport:
        on_factory()  # runs on the run's loop, inside quiet_gc
        return SimTransport(SimConfig(), vocab_size=TRACE.header.vocab_size)

    return run_replay(TRACE, factory, RunOptions(pool=2), tmp_path, virtual=True)


def test_no_full_collection_walks_what_was_loaded_before_the_run(tmp_path, no_auto_gc):
    # A full pass over a loaded process costs ~100 ms a run (a fifth of a quick sweep run's
    # CPU); a full pass with that process frozen walks only what the run made, which is cheap.
    # Counted from what is frozen before the run: Python 3.12.1's full collections move the
    # immortal objects they meet (375 at start-up) into the frozen generation themselves
    seen: list[tuple[int, int]] = []

    def note(phase: str, info: dict) -> None:
        if phase == "start":
            seen.append((info["generation"], gc.get_freeze_count() - before))

    gc.collect()  # a full pass since any earlier run ended: this run needs no other one
    before = gc.get_freeze_count()
    gc.callbacks.append(note)
    try:
        summary = _sim_run(tmp_path)
    finally:
        gc.callbacks.remove(note)
    assert summary["status"] == "ok", summary["reason"]
    assert (1, 0) in seen  # the young collection before the freeze
    assert any(gen == 2 and frozen > 0 for gen, frozen in seen)  # freeze_setup's, frozen heap
    assert not [gen for gen, frozen in seen if gen == 2 and frozen <= 0], seen
    assert gc.get_freeze_count() == 0  # everything unfrozen on the way out


def test_young_garbage_made_before_the_run_is_freed_before_the_run_starts(tmp_path, no_auto_gc):
    freed: list[str] = []
    _cycle(freed, "young")  # dropped at once: garbage only the cyclic GC can free
    assert freed == []
    at_start: list[list[str]] = []
    summary = _sim_run(tmp_path, lambda: at_start.append(list(freed)))
    assert summary["status"] == "ok", summary["reason"]
    assert at_start == [["young"]]


def test_old_garbage_frozen_with_the_run_is_collectable_when_the_run_ends(tmp_path, no_auto_gc):
    freed: list[str] = []
    keep = _cycle(freed, "old")
    gc.collect()  # survives a full pass while reachable: now in the oldest generation
    del keep  # garbage in the oldest generation, which the run's young collection skips
    summary = _sim_run(tmp_path)
    assert summary["status"] == "ok", summary["reason"]
    assert gc.get_freeze_count() == 0
    gc.collect()  # the next full collection after the run, automatic or asked for
    assert freed == ["old"]


def test_a_runs_setup_is_freed_before_the_next_run_starts(tmp_path, no_auto_gc):
    # The set-up lives the whole run, so `freeze_setup` freezes it; after the run it is garbage
    # in the oldest generation. A young collection before the next run skipped it and froze it
    # again: every run of a sweep or of `--repeats` leaked its transport (85 MB a run measured).
    freed: list[str] = []
    at_start: list[list[str]] = []

    def factory() -> SimTransport:
        at_start.append(list(freed))  # inside the run, after its collection before the freeze
        t = SimTransport(SimConfig(), vocab_size=TRACE.header.vocab_size)
        t.cycle = _cycle(freed, f"run {len(at_start)}")  # type: ignore[attr-defined]
        return t

    for i in range(3):
        summary = run_replay(TRACE, factory, RunOptions(pool=2), tmp_path / f"r{i}", virtual=True)
        assert summary["status"] == "ok", summary["reason"]
    assert at_start == [[], ["run 1"], ["run 1", "run 2"]]


def test_after_a_run_the_next_one_makes_one_full_pass_then_only_young_ones(tmp_path, no_auto_gc):
    seen: list[tuple[int, int]] = []

    def note(phase: str, info: dict) -> None:
        if phase == "start":
            seen.append((info["generation"], gc.get_freeze_count()))

    assert _sim_run(tmp_path / "a")["status"] == "ok"
    gc.callbacks.append(note)
    try:
        assert _sim_run(tmp_path / "b")["status"] == "ok"
    finally:
        gc.callbacks.remove(note)
    # the first collection of the second run is the full one over the unfrozen heap
    assert seen[0] == (2, 0), seen
    assert [gen for gen, frozen in seen if frozen == 0] == [2], seen
