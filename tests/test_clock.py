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


@pytest.mark.timeout(20)
@pytest.mark.parametrize("start_s", [0.0, 3e7, 1.7e9, 1e12, 1e15])
def test_virtual_clock_lands_on_every_deadline_at_any_magnitude(start_s):
    # asyncio's stock loop stalls past 2**24 s: `now + 1e-9 == now`, so a timer due now never ran
    async def main():
        loop = asyncio.get_running_loop()
        seen = []
        await asyncio.sleep(start_s)
        seen.append(loop.time())
        for step_s in (1e-3, 0.5, 86_400.0 * 3):
            t = loop.time() + step_s
            fut = loop.create_future()
            loop.call_at(t, fut.set_result, t)
            seen.append((await fut, loop.time()))
        return seen

    seen = run_virtual(main)
    assert seen[0] == start_s
    for deadline, now in seen[1:]:
        assert now == deadline  # exactly, not within a resolution


@pytest.mark.timeout(20)
def test_long_wait_is_one_jump_not_a_day_at_a_time():
    async def main():
        loop = asyncio.get_running_loop()
        await asyncio.sleep(3e7)
        return loop.time()

    assert run_virtual(main) == 3e7


def test_advance_if_alone_moves_the_clock_only_when_nothing_else_could_run_first():
    async def main():
        loop = asyncio.get_running_loop()
        assert loop.advance_if_alone(2.5)  # nothing ready, no timer: the wait is over at once
        t_alone = loop.time()
        loop.call_soon(lambda: None)
        ready_first = loop.advance_if_alone(1.0)  # a ready callback would run before
        await asyncio.sleep(0)
        handle = loop.call_at(t_alone + 1.0, lambda: None)
        timer_first = loop.advance_if_alone(1.0)  # due at the same time: the timer's turn too
        timer_later = loop.advance_if_alone(0.5)  # half a second before the timer: alone
        handle.cancel()
        return t_alone, ready_first, timer_first, timer_later, loop.time()

    t_alone, ready_first, timer_first, timer_later, t_end = run_virtual(main)
    assert t_alone == 2.5
    assert not ready_first and not timer_first and timer_later
    assert t_end == 3.0
