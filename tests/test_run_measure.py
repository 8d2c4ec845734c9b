"""`replay run` as a complete measurement: server counters, token-level latencies, provenance.

Against `replay sim serve` on loopback (a real subprocess), as a user runs it."""

from __future__ import annotations

import orjson
import pandas as pd

from replay.engines.sim_engines import SIM_SERVER
from replay.metrics.counters import counter_deltas
from replay.metrics.scrape import fetch_samples
from tests.test_driver_cli import _replay, sim_server, trace_file  # noqa: F401 - fixtures


def _server_counters(url: str) -> dict:
    return SIM_SERVER.map_counters(fetch_samples(url + "/metrics"))


def test_run_writes_the_servers_own_counter_deltas(trace_file, tmp_path, sim_server):  # noqa: F811
    out = tmp_path / "o"
    before = _server_counters(sim_server)
    cp = _replay(
        "run", "--trace", str(trace_file), "--pool", "2", "--out", str(out),
        "--url", sim_server, "--gap-scale", "0.001", "--scrape-interval-s", "0.05",
    )  # fmt: skip
    assert cp.returncode == 0, cp.stderr
    after = _server_counters(sim_server)
    server_deltas = counter_deltas(before, after)
    counters = orjson.loads((out / "counters.json").read_bytes())
    known = {k: v for k, v in server_deltas.items() if v is not None}
    assert known["prompt_tokens"] > 0 and known["device_hit_tokens"] > 0
    assert {k: counters[k] for k in known} == known
    run = orjson.loads((out / "run.json").read_bytes())
    prov = run["provenance"]
    # no --engine-kind: the adapter came from the replay_sim: metric prefix
    assert prov["engine"] == "sim-server" and "guessed" in prov["engine_kind"]
    assert prov["engine_version"].startswith("replay-sim ")
    assert len(prov["trace_sha256"]) == 64
    assert run["summary"]["device_hit_tokens"] == known["device_hit_tokens"]
    series = [orjson.loads(line) for line in (out / "metrics.jsonl").read_bytes().splitlines()]
    assert len(series) >= 2  # the start and end scrapes at least, in the sweep's format
    assert series[-1]["counters"]["prompt_tokens"] == after["prompt_tokens"]
    rows = pd.read_parquet(out / "calls.parquet")
    assert len(rows) == run["summary"]["calls"]


def test_run_without_metrics_goes_on_and_says_so(trace_file, tmp_path):  # noqa: F811
    from tests.servers import FaultServer

    out = tmp_path / "o"
    with FaultServer(model="m") as srv:
        cp = _replay(
            "run", "--trace", str(trace_file), "--pool", "2", "--out", str(out),
            "--url", srv.url, "--gap-scale", "0.001",
        )  # fmt: skip
    assert cp.returncode == 0, cp.stderr
    assert "no counters.json" in cp.stderr
    assert not (out / "counters.json").exists()
    prov = orjson.loads((out / "run.json").read_bytes())["provenance"]
    assert prov["engine"] == "external" and prov["engine_kind"].startswith("not guessed")


def test_run_keeps_stream_times_and_prints_the_latency_table(trace_file, tmp_path, sim_server):  # noqa: F811
    out = tmp_path / "o"
    cp = _replay(
        "run", "--trace", str(trace_file), "--pool", "2", "--out", str(out),
        "--url", sim_server, "--gap-scale", "0.001", "--slo", "ttft=2s,itl=50ms",
    )  # fmt: skip
    assert cp.returncode == 0, cp.stderr
    assert "latency ms" in cp.stdout and "goodput" in cp.stdout
    rows = pd.read_parquet(out / "calls.parquet")
    multi = rows[rows["completion_tokens"] >= 2]
    assert len(multi) > 0
    # the simulator's server streams the first token, then the rest: two stream times
    assert (multi["t_first_token"] < multi["t_second_token"]).all()
    assert (multi["t_second_token"] <= multi["t_last_token"]).all()
    assert (multi["t_last_token"] <= multi["t_end"]).all()
    assert (multi["stream_tokens"] >= 2).all()
    s = orjson.loads((out / "run.json").read_bytes())["summary"]
    table = s["latency_percentiles"]
    assert list(table["itl_s"]) == ["p1", "p5", "p10", "p25", "p50", "p75", "p90", "p95", "p99"]
    itl = (multi["t_last_token"] - multi["t_first_token"]) / (multi["completion_tokens"] - 1)
    assert abs(table["itl_s"]["p50"] - itl.median()) < 1e-9
    streamed2 = rows[rows["t_second_token"].notna()]
    tt2t = streamed2["t_second_token"] - streamed2["t_send"]
    assert abs(s["tt2t_p50_s"] - tt2t.median()) < 1e-9
    assert s["slo_s"] == {"ttft_s": 2.0, "itl_s": 0.05}
    assert 0 <= s["goodput_calls"] <= s["calls"]


def test_latency_table_columns_stay_apart_past_a_thousand_seconds():
    from replay.cli.run_summary import latency_lines

    qs = (1, 5, 10, 25, 50, 75, 90, 95, 99)
    table = {"ttft_s": {f"p{q}": 1000.0 + 100 * q for q in qs}}  # an overloaded server
    head, ttft, *_ = latency_lines({"latency_percentiles": table})
    values = ttft.split()[1:]
    assert values == [format((1000.0 + 100 * q) * 1e3, ".1f") for q in qs]
    assert len(head.split()) == 2 + len(qs)  # "latency", "ms", p1 .. p99
