"""Sweeps on a local Ray with two worker slots: the summary equals the sequential sweep's (counters
identical; makespans too for the virtual-time `sim`), shipped results equal shared ones, resume
skips finished runs, and Ctrl-C leaves results a rerun completes."""

from __future__ import annotations

import _thread
import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import orjson
import pandas as pd
import pytest

from replay.errors import ConfigError
from replay.sweep.config import load_experiment
from replay.sweep.runner import run_sweep
from tests.ray.helpers import OBJECT_STORE_BYTES, comparable, experiment, nodes_of

ray = pytest.importorskip("ray", reason="the ray extra is not installed (make test-ray)")
pytestmark = pytest.mark.ray


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=OBJECT_STORE_BYTES,
        log_to_driver=False,
    )
    yield
    ray.shutdown()


def sweep(exp, root, lines=None):
    echo = (lambda s: None) if lines is None else lines.append
    return run_sweep(exp, results_root=root, echo=echo)


def test_sim_server_on_two_slots_equals_the_sequential_sweep(tmp_path, sequential):
    exp = experiment(tmp_path, engine="sim-server", backend="ray")
    lines: list[str] = []
    result = sweep(exp, tmp_path / "res", lines)
    assert [o.status for o in result.outcomes] == ["ok"] * 6
    pd.testing.assert_frame_equal(
        comparable(result.exp_dir / "summary.parquet"),
        comparable(sequential["sim-server"] / "summary.parquet"),
    )
    node = ray.get_runtime_context().get_node_id()[:8]
    assert set(nodes_of(result.exp_dir).values()) == {f"{os.uname().nodename} (ray node {node})"}
    assert lines[-1].startswith("[6/6] ")
    # resume: a second sweep finds everything finished and submits nothing
    again = sweep(exp, tmp_path / "res")
    assert [o.status for o in again.outcomes] == ["skipped"] * 6


def test_sim_makespans_equal_and_shipped_results_equal_shared(tmp_path, sequential):
    extra = ("makespan_s", "calls", "computed_prefill_tokens")
    want = comparable(sequential["sim"] / "summary.parquet", extra)
    for mode in ("shared", "ship"):
        exp = experiment(tmp_path, engine="sim", name=f"sim-{mode}", backend="ray", results=mode)
        result = sweep(exp, tmp_path / "res")
        assert [o.status for o in result.outcomes] == ["ok"] * 6
        got = comparable(result.exp_dir / "summary.parquet", extra)
        pd.testing.assert_frame_equal(got, want)
        names = sorted(p.name for p in (result.exp_dir / "host_tier_gib=1" / "r0").iterdir())
        assert names == sorted(p.name for p in (sequential["sim"] / "host_tier_gib=1/r0").iterdir())
    assert not list(tmp_path.glob("res/*/.ray-token-*"))  # the head cleans up its token


@pytest.fixture
def sigint_handled():
    """Python's own SIGINT handler, as in a terminal. Started by make or a shell script in the
    background with no terminal, this process inherits SIGINT ignored, and then
    `_thread.interrupt_main` does nothing: the sweep would never see its Ctrl-C."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_cancels_and_a_rerun_completes(tmp_path, sequential, sigint_handled):
    exp = experiment(tmp_path, engine="sim-server", backend="ray")
    exp_dir = tmp_path / "res" / exp.name
    first_done = threading.Event()

    def echo(line: str) -> None:
        if line.startswith("[1/6]"):
            first_done.set()

    def interrupt_midway():
        if first_done.wait(timeout=120):
            _thread.interrupt_main()  # Ctrl-C's KeyboardInterrupt, while the head waits on Ray

    t = threading.Thread(target=interrupt_midway, daemon=True)
    t.start()
    result = run_sweep(exp, results_root=tmp_path / "res", echo=echo)
    t.join()
    assert result.interrupted
    finished = [o for o in result.outcomes if o.status == "ok"]
    assert 1 <= len(finished) < 6
    assert not [p for p in exp_dir.glob("*/r*/server.json")]  # every engine was stopped
    again = sweep(exp, tmp_path / "res")
    assert not again.interrupted
    statuses = sorted(o.status for o in again.outcomes)
    assert statuses.count("skipped") == len(finished) and statuses.count("ok") == 6 - len(finished)
    pd.testing.assert_frame_equal(
        comparable(again.exp_dir / "summary.parquet"),
        comparable(sequential["sim-server"] / "summary.parquet"),
    )


def test_a_node_that_fails_its_preflight_stops_the_sweep_naming_it(tmp_path):
    """The head checks nothing itself (it need not have the nodes' engines); the node does,
    before its first launch, and its failure ends the sweep as a local preflight would: one
    ConfigError (exit 2) naming the node and the check, no run started."""
    missing = tmp_path / "nowhere" / "bin" / "python"
    path = tmp_path / "pf.toml"
    path.write_text(
        'name = "pf"\n[trace]\nsynth = { preset = "swe-agent", tasks = 2, seed = 1 }\n'
        f'[engine]\nkind = "vllm"\ndevice = "cpu"\nmodel = "m"\npython = "{missing}"\n'
        '[run]\npool = 1\n[cluster]\nbackend = "ray"\n[predict]\nenabled = false\n'
    )
    exp = load_experiment(path)
    with pytest.raises(ConfigError) as e:
        sweep(exp, tmp_path / "res")
    node = ray.get_runtime_context().get_node_id()[:8]
    assert e.value.field == "preflight"
    assert f"on {os.uname().nodename} (ray node {node}): vllm interpreter:" in e.value.why
    assert f"{missing} not found" in e.value.why
    assert not list((tmp_path / "res" / "pf").glob("*/r*/run.json"))


def test_predictions_are_computed_on_a_worker_and_equal_the_local_ones(tmp_path, monkeypatch):
    """The model's predictions are a task: the head only writes what comes back, and the file is
    byte for byte the one a local sweep writes."""
    text = experiment(tmp_path, engine="sim", name="pred").source
    path = tmp_path / "pred.toml"
    path.write_text(Path(text).read_text().replace("enabled = false", "enabled = true"))
    local = load_experiment(path)
    assert local.predict.enabled
    want = (sweep(local, tmp_path / "local").exp_dir / "predictions.json").read_bytes()
    assert orjson.loads(want)["groups"][0]["prediction"]  # a real prediction, not a skip

    def on_the_head(*args, **kwargs):
        raise AssertionError("the head computed the predictions")

    monkeypatch.setattr("replay.sweep.prepare.predictions_doc", on_the_head)
    cluster = dataclasses.replace(local.cluster, backend="ray")
    result = sweep(dataclasses.replace(local, cluster=cluster), tmp_path / "ray")
    assert [o.status for o in result.outcomes] == ["ok"] * 6
    assert (result.exp_dir / "predictions.json").read_bytes() == want


def test_ray_local_starts_its_own_ray_and_equals_the_sequential_sweep(tmp_path, sequential):
    """`replay sweep --ray local` in a fresh process: the private Ray it starts (two slots, idle
    workers kept) runs the sweep and ends with it."""
    exp = experiment(tmp_path, engine="sim-server", name="own")
    toml = Path(exp.source)
    toml.write_text(toml.read_text() + "[cluster]\nlocal_cpus = 2\n")
    code = (
        "import sys; from replay.cli.main import main; "
        f"sys.argv = ['replay', 'sweep', {str(toml)!r}, '--ray', 'local', '--results', "
        f"{str(tmp_path / 'res')!r}]; main()"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    pd.testing.assert_frame_equal(
        comparable(tmp_path / "res" / "own" / "summary.parquet"),
        comparable(sequential["sim-server"] / "summary.parquet"),
    )
    # each run records the sweep's command, not the Ray worker's (default_worker.py ...)
    argv = ["replay", "sweep", str(toml), "--ray", "local", "--results", str(tmp_path / "res")]
    for run_json in (tmp_path / "res" / "own").glob("*/r*/run.json"):
        assert orjson.loads(run_json.read_bytes())["provenance"]["argv"] == argv, run_json


def test_a_run_start_recorded_on_a_worker_is_read_once_on_the_head():
    """Where a run started goes through Ray's key-value store: written by the task before its
    run, handed to the head once (a run submitted again is seen starting anew), and gone after
    the sweep closes its reader."""
    from replay.sweep.ray_starts import Starts, record_start

    starts = Starts("t0ken")
    ray.get(ray.remote(record_start).remote("t0ken", "host_tier_gib=1/r0", "node-a"))
    record_start("other", "host_tier_gib=1/r0", "node-b")  # another sweep's record
    assert starts.take() == [("host_tier_gib=1/r0", "node-a")]
    assert starts.take() == []
    record_start("t0ken", "host_tier_gib=4/r1", "node-a")
    starts.close()
    assert starts.take() == []
    assert Starts("other").take() == [("host_tier_gib=1/r0", "node-b")]


def _ray_workers_under_us() -> set[int]:
    """Ray worker processes (named `ray::...` by Ray, its agents apart) below this process."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                stat = (entry / "stat").read_text()
                parent[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    ours, grew = {os.getpid()}, True
    while grew:
        new = {pid for pid, pp in parent.items() if pp in ours} - ours
        ours |= new
        grew = bool(new)
    workers = set()
    for pid in ours:
        try:
            name = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].strip()
        except OSError:
            continue
        if name.startswith(b"ray::") and not name.endswith(b"Agent"):
            workers.add(pid)
    return workers


def test_a_sweep_runs_on_the_slots_workers_alone(tmp_path):
    """Two slots, at most two worker processes at any time: the sweep keeps no actor of its own
    (an actor is one more process, whose start costs as much CPU as a run of a small sweep)."""
    exp = experiment(tmp_path, engine="sim", name="procs", backend="ray")
    most = 0
    done = threading.Event()

    def watch():
        nonlocal most
        while not done.wait(0.05):
            most = max(most, len(_ray_workers_under_us()))

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        result = sweep(exp, tmp_path / "res")
    finally:
        done.set()
        t.join()
    assert [o.status for o in result.outcomes] == ["ok"] * 6
    assert 1 <= most <= 2
