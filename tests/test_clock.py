"""The virtual-time loop: time jumps to the next timer, ordering is deterministic, deadlocks are loud."""

import asyncio

import pytest

from replay.clock import LoopClock, VirtualTimeLoop, run_virtual


def test_virtual_time_jumps_to_timers_in_order():
    log = []

    async def agent(name, delays):
        clock = LoopClock()
        for d in delays:
            await clock.sleep(d)
            log.append((round(clock.now(), 9), name))

    async def main():
        await asyncio.gather(agent("a", [5.0, 5.0]), agent("b", [3.0, 100.0]))
        return asyncio.get_running_loop().time()

    end = run_virtual(main)
    assert end == pytest.approx(103.0)
    assert log == [(3.0, "b"), (5.0, "a"), (10.0, "a"), (103.0, "b")]


def test_sleep_until_absolute_deadline_and_wait_for_timeout():
    async def main():
        clock = LoopClock()
        await clock.sleep_until(42.5)
        t1 = clock.now()
        ev = asyncio.Event()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(ev.wait(), timeout=7.0)
        return t1, clock.now()

    t1, t2 = run_virtual(main)
    assert t1 == pytest.approx(42.5)
    assert t2 == pytest.approx(49.5)


def test_virtual_loop_refuses_to_wait_forever():
    async def main():
        await asyncio.Event().wait()

    loop = VirtualTimeLoop()
    try:
        with pytest.raises(RuntimeError, match="wait forever"):
            loop.run_until_complete(main())
    finally:
        loop.close()


def test_same_program_same_virtual_history():
    async def main():
        out = []

        async def worker(i):
            for k in range(50):
                await asyncio.sleep(((i * 7919 + k * 104729) % 97) / 10)
                out.append((asyncio.get_running_loop().time(), i))

        await asyncio.gather(*(worker(i) for i in range(8)))
        return out

    assert run_virtual(main) == run_virtual(main)
