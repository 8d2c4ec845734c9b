"""Event-driven LRU tiers against a brute-force simulation with ordered dicts (the oracle)."""

from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.errors import ConfigError
from replay.model.lru_events import device_pass, host_pass
from replay.model.order import Schedule


def _events(times):
    """(call, kind) in time order; at equal times END (0), then PREFILL (1), then LOOKUP (2).

    A phase of zero length happens right after everything at that time (rank 3, then 4)."""
    ev = []
    for c, (tl, tp, te) in enumerate(times):
        ev.append(((tl, 2), 2, c))
        p = (tp, 1) if tp > tl else (tl, 3)
        e = (te, 0) if te > tp else ((tp, 3) if tp > tl else (tl, 4))
        ev += [(p, 1, c), (e, 0, c)]
    return [(c, k) for _, k, c in sorted(ev)]


def _put(cache, k, cap):
    cache[k] = None
    cache.move_to_end(k)
    while len(cache) > cap:
        cache.popitem(last=False)


def brute_host(calls, times, cap):
    cache, noted = OrderedDict(), {}
    run, written = [0] * len(calls), [0] * len(calls)
    for c, kind in _events(times):
        keys = calls[c]
        if kind == 2:
            present = [k in cache for k in keys]
            run[c] = present.index(False) if False in present else len(present)
            for k, p in zip(keys, present, strict=True):
                if p:
                    cache.move_to_end(k)
            noted[c] = [k for k, p in zip(keys, present, strict=True) if not p]
        elif kind == 1:
            cand = [k for k in noted.pop(c) if k not in cache]
            for k in cand:
                _put(cache, k, cap)
            written[c] = len(cand)
    return run, written


def brute_device(calls, times, cap, prompt_blocks, matchable):
    cache = OrderedDict()
    hit = [0] * len(calls)
    for c, kind in _events(times):
        keys = calls[c]
        if kind == 2:
            m = 0
            while m < min(matchable[c], prompt_blocks[c]) and keys[m] in cache:
                m += 1
            hit[c] = m
            stored = keys[: prompt_blocks[c]]  # the whole prompt claims its space at admission
        elif kind == 1:
            stored = keys[: prompt_blocks[c]]
        else:
            stored = keys
        for k in reversed(stored):
            _put(cache, k, cap)
    return hit


@st.composite
def scheduled_calls(draw):
    n = draw(st.integers(1, 12))
    calls = [draw(st.lists(st.integers(0, 10), max_size=6, unique=True)) for _ in range(n)]
    times = []
    for _ in range(n):
        t = draw(st.integers(0, 8))
        p = t + draw(st.integers(0, 3))
        times.append((t, p, p + draw(st.integers(0, 3))))
    return calls, times


def _flat(calls):
    keys = np.array([k for c in calls for k in c], dtype=np.int64)
    offsets = np.cumsum([0] + [len(c) for c in calls]).astype(np.int64)
    return keys, offsets


def _schedule(times):
    t = np.array(times, dtype=np.float64).reshape(-1, 3)
    return Schedule([("t", i) for i in range(len(times))], t[:, 0], t[:, 1], t[:, 2])


@settings(max_examples=200, deadline=None)
@given(scheduled_calls(), st.integers(0, 14))
def test_host_pass_matches_brute_force(data, cap):
    calls, times = data
    keys, offsets = _flat(calls)
    run, written = host_pass(keys, offsets, _schedule(times), cap)
    want_run, want_written = brute_host(calls, times, cap)
    assert run.tolist() == want_run
    assert written.tolist() == want_written


@settings(max_examples=200, deadline=None)
@given(scheduled_calls(), st.integers(1, 14), st.data())
def test_device_pass_matches_brute_force(data, cap, more):
    calls, times = data
    prompt_blocks = [more.draw(st.integers(0, len(c))) for c in calls]
    matchable = [more.draw(st.integers(0, p)) for p in prompt_blocks]
    keys, offsets = _flat(calls)
    got = device_pass(
        keys, offsets, _schedule(times), cap, np.array(prompt_blocks), np.array(matchable)
    )
    assert got.tolist() == brute_device(calls, times, cap, prompt_blocks, matchable)


def test_overlapping_calls_do_not_see_each_others_unwritten_chunks():
    # B looks up while A is still prefilling the same prefix: nothing there yet for B.
    calls = [[1, 2, 3], [1, 2, 3]]
    keys, offsets = _flat(calls)
    overlapping = _schedule([(0, 2, 3), (1, 4, 5)])
    run, written = host_pass(keys, offsets, overlapping, 10)
    assert run.tolist() == [0, 0]
    assert written.tolist() == [3, 0]  # A wrote them by the time B's prefill ended
    run, written = host_pass(keys, offsets, Schedule.sequential([("a", 0), ("b", 0)]), 10)
    assert (run.tolist(), written.tolist()) == ([0, 3], [3, 0])


def test_schedule_rejects_times_out_of_order():
    with pytest.raises(ConfigError):
        Schedule([("a", 0)], np.array([2.0]), np.array([1.0]), np.array([3.0]))


@pytest.mark.parametrize("kernel", ["_host_kernel", "_device_kernel"])
def test_ctrl_c_during_a_kernel_is_raised_after_it_returns(monkeypatch, kernel):
    # a SIGINT that came while numba handed the kernel's arrays back ended predict with a
    # SystemError traceback or a segfault (numba #2324): the signal now waits for the return
    import os
    import signal

    from replay.model import lru_events

    real = getattr(lru_events, kernel)
    returned = []

    def kernel_hit_by_ctrl_c(*args):
        os.kill(os.getpid(), signal.SIGINT)  # delivered while the "kernel" runs
        out = real(*args)
        returned.append(True)
        return out

    monkeypatch.setattr(lru_events, kernel, kernel_hit_by_ctrl_c)
    keys = np.array([1, 2, 1, 2], np.int64)
    offsets = np.array([0, 2, 4], np.int64)
    schedule = Schedule.sequential([("a", 0), ("b", 0)])
    with pytest.raises(KeyboardInterrupt):
        if kernel == "_host_kernel":
            host_pass(keys, offsets, schedule, 4)
        else:
            device_pass(keys, offsets, schedule, 4, np.array([2, 2]), np.array([2, 2]))
    assert returned == [True]  # the kernel ran to its end first
