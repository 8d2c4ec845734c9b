"""The real-time loop's selector: waits to the microsecond, still ended at once by I/O and signals."""

from __future__ import annotations

import asyncio
import selectors
import signal
import socket
import threading
import time

import pytest

from replay.driver.fine_timer import SPIN_S, FineEpollSelector, fine_timer_available, new_loop
from replay.driver.options import RunOptions
from tests.servers import ScriptedTransport, make_trace

pytestmark = pytest.mark.skipif(not fine_timer_available(), reason="epoll only")


def test_ready_io_ends_a_long_wait_at_once_and_is_reported():
    a, b = socket.socketpair()
    sel = FineEpollSelector()
    try:
        sel.register(a, selectors.EVENT_READ, "a")
        b.send(b"x")
        t0 = time.monotonic()
        ready = sel.select(30.0)
        assert time.monotonic() - t0 < 5.0
        assert [(k.data, ev) for k, ev in ready] == [("a", selectors.EVENT_READ)]
    finally:
        sel.close()
        a.close()
        b.close()


@pytest.mark.parametrize("spin_s", [SPIN_S, 30.0])  # 30: the whole wait is polled
def test_io_arriving_during_the_wait_ends_it(spin_s):
    socketpair = socket.socketpair()
    a, b = socketpair
    sel = FineEpollSelector(spin_s)
    timer = threading.Timer(0.05, b.send, (b"x",))
    try:
        sel.register(a, selectors.EVENT_READ, "a")
        timer.start()
        t0 = time.monotonic()
        ready = sel.select(30.0)
        assert 0.04 <= time.monotonic() - t0 < 5.0
        assert [k.data for k, _ in ready] == ["a"]
    finally:
        timer.cancel()
        sel.close()
        for s in socketpair:
            s.close()


@pytest.mark.parametrize("spin_s", [0.0, SPIN_S, 0.003])
def test_a_wait_with_nothing_ready_lasts_at_least_its_timeout(spin_s):
    # 0.003: every wait but the last is polled whole
    sel = FineEpollSelector(spin_s)
    try:
        for timeout_s in (0.0003, 0.0017, 0.004):
            t0 = time.monotonic()
            assert sel.select(timeout_s) == []
            assert time.monotonic() - t0 >= timeout_s
        assert sel.select(0) == []
    finally:
        sel.close()


def _wait_cpu_s(spin_s: float, wait_s: float) -> float:
    sel = FineEpollSelector(spin_s)
    try:
        c0 = time.process_time()
        assert sel.select(wait_s) == []
        return time.process_time() - c0
    finally:
        sel.close()


def test_the_spin_is_spent_polling_and_no_spin_sleeps():
    # CPU, not wall time: a 0.1 s wait polled for its last 0.05 s runs on the CPU for some of
    # that even on a loaded machine; one that sleeps throughout uses next to none
    assert _wait_cpu_s(0.05, 0.1) >= 0.005
    assert _wait_cpu_s(0.0, 0.1) < 0.005


@pytest.mark.parametrize("spin_s", [-0.001, float("nan")])
def test_a_negative_spin_is_refused(spin_s):
    with pytest.raises(ValueError, match="spin_s"):
        FineEpollSelector(spin_s)


def _min_lateness_s(loop: asyncio.AbstractEventLoop, wait_s: float, n: int) -> float:
    async def waits() -> float:
        best = float("inf")
        for _ in range(n):
            t = loop.time() + wait_s
            fut = loop.create_future()
            loop.call_at(t, fut.set_result, None)
            await fut
            best = min(best, loop.time() - t)
        return best

    return loop.run_until_complete(waits())


def test_timers_fire_within_a_fraction_of_a_millisecond_where_asyncio_rounds_up():
    # 1.5 ms waits: asyncio's epoll wait rounds up to 2 ms, so every timer fires >= 0.5 ms late;
    # the fine selector's best of 20 comes well under that (the best, not the median: other
    # processes on the machine can only make single wake-ups later)
    plain, fine = asyncio.new_event_loop(), new_loop()
    try:
        assert isinstance(fine._selector, FineEpollSelector)  # type: ignore[attr-defined]
        assert _min_lateness_s(plain, 0.0015, 20) >= 0.00045
        assert _min_lateness_s(fine, 0.0015, 20) < 0.0003
    finally:
        plain.close()
        fine.close()


def test_a_signal_ends_the_wait_and_its_handler_runs():
    loop = new_loop()
    got = []
    try:
        loop.add_signal_handler(signal.SIGUSR1, got.append, "usr1")
        threading.Timer(0.05, signal.raise_signal, (signal.SIGUSR1,)).start()

        async def wait() -> float:
            t0 = loop.time()
            while not got and loop.time() - t0 < 10:
                await asyncio.sleep(0.5)
            return loop.time() - t0

        assert loop.run_until_complete(wait()) < 5.0
        assert got == ["usr1"]
    finally:
        loop.remove_signal_handler(signal.SIGUSR1)
        loop.close()


@pytest.mark.parametrize("spin_s", [None, 0.0, 0.002])
def test_a_real_time_run_uses_the_fine_selector_with_the_options_spin(tmp_path, spin_s):
    from replay.driver.run import run_replay

    seen = []

    class Probe(ScriptedTransport):
        async def start(self) -> None:
            sel = asyncio.get_running_loop()._selector  # type: ignore[attr-defined]
            seen.append((type(sel), sel.spin_s))
            await super().start()

    trace = make_trace({"a": [{}, {}]})
    opts = RunOptions(pool=1) if spin_s is None else RunOptions(pool=1, timer_spin_s=spin_s)
    summary = run_replay(trace, lambda: Probe(ttft_s=0.001, per_token_s=0.0), opts, tmp_path)
    assert summary["status"] == "ok"
    assert seen == [(FineEpollSelector, SPIN_S if spin_s is None else spin_s)]
