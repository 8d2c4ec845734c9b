"""The control plane's plain GETs (replay/metrics/plain_get.py) over real loopback sockets: a kept
connection is reused, a connection the server closed is reopened once, failures are one-line
EngineErrors; a `replay run` does not import httpx for its scrapes and probes."""

from __future__ import annotations

import pytest

from replay.driver.control import is_healthy, served_model
from replay.errors import EngineError
from replay.metrics.plain_get import GetError, PlainGetter
from replay.metrics.scrape import fetch_samples, fetch_text
from tests.servers import ScriptServer, free_port

PAGE = b'# TYPE m_total counter\nm_total{a="x"} 3\n'


def _answer(status: int = 200, body: bytes = PAGE):
    async def script(ex) -> bool:
        ex.writer.write(
            b"HTTP/1.1 %d X\r\ncontent-length: %d\r\n\r\n%s" % (status, len(body), body)
        )
        await ex.writer.drain()
        return True

    return script


def test_gets_share_one_kept_connection_and_reopen_a_closed_one():
    with ScriptServer(_answer()) as srv:
        url = f"http://127.0.0.1:{srv.port}/metrics?x=1"
        with PlainGetter(url, 5.0) as g:
            assert g.get(url) == (200, PAGE)
            assert g.get(url) == (200, PAGE)
            assert srv.opened == 1
            srv.close(0)  # the server ends the kept-alive connection between two GETs
            assert g.get(url) == (200, PAGE)
            assert srv.opened == 2
        assert [ex.path for ex in srv.exchanges] == ["/metrics?x=1"] * 3
        assert {ex.method for ex in srv.exchanges} == {"GET"}
        assert fetch_samples(url) == {"m_total": {(("a", "x"),): 3.0}}


def test_failures_are_engine_errors_naming_the_url():
    with ScriptServer(_answer(503, b"busy")) as srv:
        url = f"http://127.0.0.1:{srv.port}/metrics"
        with pytest.raises(EngineError, match=r"/metrics: metrics scrape returned HTTP 503$"):
            fetch_text(url)
        assert is_healthy(f"http://127.0.0.1:{srv.port}") is False

    async def hang_up(ex) -> bool:
        return False  # close without an answer

    with ScriptServer(hang_up) as srv:
        url = f"http://127.0.0.1:{srv.port}/metrics"
        with pytest.raises(EngineError, match="metrics scrape failed: RemoteDisconnected"):
            fetch_text(url)
    refused = f"http://127.0.0.1:{free_port()}/metrics"
    with pytest.raises(EngineError, match="metrics scrape failed: ConnectionRefusedError"):
        fetch_text(refused)
    with pytest.raises(GetError, match="not an http"):
        PlainGetter("ftp://host/x", 1.0)


def test_served_model_and_health_over_plain_gets():
    body = b'{"object":"list","data":[{"id":"m-1"},{"id":"m-2"}]}'
    with ScriptServer(_answer(200, body)) as srv:
        root = f"http://127.0.0.1:{srv.port}"
        assert served_model(root + "/v1") == "m-1"
        assert is_healthy(root) is True
        assert [ex.path for ex in srv.exchanges] == ["/v1/models", "/health"]
    with ScriptServer(_answer(200, b"not json")) as srv:
        assert served_model(f"http://127.0.0.1:{srv.port}") is None
    assert served_model(f"http://127.0.0.1:{free_port()}") is None


def test_a_silent_server_costs_the_version_probe_one_timeout_not_one_per_path():
    from replay.engines.provenance import server_version

    async def say_nothing(ex) -> bool:
        return True  # no answer; the connection stays open until the client gives up

    with ScriptServer(say_nothing) as srv:
        assert server_version(f"http://127.0.0.1:{srv.port}", timeout_s=0.2) is None
        assert srv.opened == 1  # the other version paths were not tried
    with ScriptServer(_answer(404, b"")) as srv:  # answered: every path is tried
        assert server_version(f"http://127.0.0.1:{srv.port}", timeout_s=0.2) is None
        assert len(srv.exchanges) == 3


def test_counters_of_a_server_gone_by_the_end_are_the_last_scrape_minus_the_start():
    """The end scrape fails (the server was killed): the counters are the run's up to the last
    periodic scrape, and run.json's info says until when, instead of every counter unknown."""
    from types import SimpleNamespace

    from replay.metrics.scrape import MetricsRecorder, delta_counters_fn

    def page(n: int) -> bytes:
        return b"# TYPE restored_total counter\nrestored_total %d\n" % (100 * n)

    def answering(scrapes: int):
        async def script(ex) -> bool:
            if ex.index >= scrapes:  # then gone: closes without an answer
                return False
            body = page(ex.index)
            head = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body)
            ex.writer.write(head + body)
            return True

        return script

    mapper = SimpleNamespace(
        map_counters=lambda s: {"host_restore_tokens": s["restored_total"][()]}, metrics_lag_s=0
    )
    with ScriptServer(answering(3)) as srv:  # start, two periodic scrapes
        rec = MetricsRecorder(f"http://127.0.0.1:{srv.port}/metrics", mapper.map_counters, None)
        start = mapper.map_counters(rec.scrape_now())
        rec.scrape_now()
        rec.scrape_now()  # the last one the server answers
        info: dict = {}
        deltas = delta_counters_fn(rec, mapper, start, info)
        counters = deltas()
    assert counters["host_restore_tokens"] == 200
    assert "end_scrape_error" in info and info["counters_until_s"] >= 0
    # the run says so: its counters cover less than its calls (the audit's 58% device hits
    # against 83% from the calls, with no warning)
    (said,) = deltas.warnings
    assert "the last periodic scrape" in said and "cover less of the run" in said
    # no scrape after the start: nothing is known
    with ScriptServer(answering(1)) as srv:
        rec = MetricsRecorder(f"http://127.0.0.1:{srv.port}/metrics", mapper.map_counters, None)
        start = mapper.map_counters(rec.scrape_now())
        info = {}
        assert delta_counters_fn(rec, mapper, start, info)()["host_restore_tokens"] is None
        assert "end_scrape_error" in info and "counters_until_s" not in info


def test_the_end_scrape_waits_for_an_engine_that_counts_late():
    """LMCache adds its counts to /metrics every 10 s: the end scrape taken as the replay ended
    missed the last interval's restores. An adapter's `metrics_lag_s` is waited first."""
    import time
    from types import SimpleNamespace

    from replay.metrics.scrape import MetricsRecorder, delta_counters_fn

    t0 = time.monotonic()

    async def script(ex) -> bool:  # the work's count appears 1 s after it was done
        body = b"# TYPE restored_total counter\nrestored_total %d\n" % (
            700 if time.monotonic() - t0 > 1.0 else 0
        )
        ex.writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
        return True

    got = {}
    for lag in (0.0, 1.5):
        mapper = SimpleNamespace(
            map_counters=lambda s: {"host_restore_tokens": s["restored_total"][()]},
            metrics_lag_s=lag,
        )
        with ScriptServer(script) as srv:
            t0 = time.monotonic()
            rec = MetricsRecorder(f"http://127.0.0.1:{srv.port}/metrics", mapper.map_counters, None)
            start = mapper.map_counters(rec.scrape_now())
            info: dict = {}
            got[lag] = delta_counters_fn(rec, mapper, start, info)()["host_restore_tokens"]
            rec.stop()
    assert got == {0.0: 0, 1.5: 700}


def test_a_server_restart_seen_between_scrapes_keeps_what_it_had_counted():
    """The server restarted mid-run and counted past its start value again: the end minus the
    start was 500 where 2,300 tokens were served. The counts before the restart are added."""
    from types import SimpleNamespace

    from replay.metrics.scrape import MetricsRecorder, delta_counters_fn

    series = [1000, 1800, 0, 1500]  # start, a periodic scrape, restarted, the end

    async def script(ex) -> bool:
        body = b"# TYPE p_total counter\np_total %d\n" % series[min(ex.index, len(series) - 1)]
        ex.writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
        return True

    mapper = SimpleNamespace(
        map_counters=lambda s: {"prompt_tokens": s["p_total"][()]}, metrics_lag_s=0
    )
    with ScriptServer(script) as srv:
        rec = MetricsRecorder(f"http://127.0.0.1:{srv.port}/metrics", mapper.map_counters, None)
        start = mapper.map_counters(rec.scrape_now())
        rec.scrape_now()
        rec.scrape_now()
        info: dict = {}
        counters = delta_counters_fn(rec, mapper, start, info)()
        rec.stop()
    assert counters["prompt_tokens"] == 800 + 1500 and info["counter_resets"] == 1


def test_the_end_scrape_and_stop_do_not_wait_behind_a_periodic_scrape_on_a_hung_server(tmp_path):
    """A periodic scrape stuck on a server that stopped answering held the recorder's lock for
    its whole timeout: the end scrape waited behind it, then `stop` waited for it again (about
    12 s of a Ctrl-C against a hung server). What it brings back after the end scrape is not the
    run's: it is dropped, not read as a counter that fell (a reset)."""
    import asyncio
    import time
    from types import SimpleNamespace

    import orjson

    from replay.metrics.scrape import MetricsRecorder, delta_counters_fn

    async def script(ex) -> bool:
        value = {0: 100, 1: 50}.get(ex.index, 300)  # the stuck one would read as a fall
        if ex.index == 1:
            await asyncio.sleep(1.5)
        body = b"# TYPE p_total counter\np_total %d\n" % value
        ex.writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
        return True

    mapper = SimpleNamespace(
        map_counters=lambda s: {"prompt_tokens": s["p_total"][()]}, metrics_lag_s=0
    )
    series = tmp_path / "metrics.jsonl"
    with ScriptServer(script) as srv:
        url = f"http://127.0.0.1:{srv.port}/metrics"
        rec = MetricsRecorder(url, mapper.map_counters, series, interval_s=0.05, timeout_s=5)
        start = mapper.map_counters(rec.start())
        while len(srv.exchanges) < 2:  # the periodic scrape is in, and stuck
            time.sleep(0.01)
        t0 = time.monotonic()
        info: dict = {}
        counters = delta_counters_fn(rec, mapper, start, info)()
        rec.stop()
        took_s = time.monotonic() - t0
        time.sleep(1.6)  # the stuck scrape comes back
    assert counters["prompt_tokens"] == 200 and "counter_resets" not in info
    assert took_s < 1.0, took_s
    lines = [orjson.loads(x)["counters"]["prompt_tokens"] for x in series.read_bytes().splitlines()]
    assert lines == [100, 300] and rec.resets == 0 and rec.errors == 0
