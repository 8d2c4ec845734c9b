"""Tier predictions against a brute-force two-tier LRU simulation over token tuples (the oracle)."""

from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.errors import ConfigError
from replay.model.predict import host_capacity_chunks, predict_tiers
from replay.model.presets import GIB
from tests.model_traces import agent_tasks, common_prefix, make_trace


def _keys(tokens, size):
    return [tuple(tokens[: (i + 1) * size]) for i in range(len(tokens) // size)]


def _store(cache, keys, capacity):
    for k in keys:
        cache[k] = None
        cache.move_to_end(k)
        while len(cache) > capacity:
            cache.popitem(last=False)


def brute_force(tasks, order, chunk, block, host_chunks, device_blocks):
    """The agreed semantics, played plainly on token tuples.

    Host: LRU of prompt chunks; a lookup touches the present ones, then the missing ones are
    written. Device: LRU of context blocks (prompt + output but its last token) stored tail first;
    only blocks that leave one prompt token to compute can hit, and a restore stops there too.
    """
    turns = {(t, i): turn for t, ts in tasks.items() for i, turn in enumerate(ts)}
    host, dev = OrderedDict(), OrderedDict()
    tot = dict(computed=0, restore=0, write=0, coverage=0, device=0)
    for ref in order:
        prompt, out = turns[ref]
        n = len(prompt)
        devp = 0
        for k in _keys(prompt[: n - 1], block):
            if k not in dev:
                break
            devp += block
        hkeys = _keys(prompt, chunk)
        present = [k in host for k in hkeys]
        cov = (present.index(False) if False in present else len(present)) * chunk
        restore = max(0, min(cov, n - 1) - devp)
        tot["coverage"] += cov
        tot["device"] += devp
        tot["restore"] += restore
        tot["computed"] += n - devp - restore
        tot["write"] += chunk * present.count(False) if host_chunks else 0  # no tier, no writes
        _store(host, [k for k, p in zip(hkeys, present, strict=True) if p], host_chunks)
        _store(host, [k for k, p in zip(hkeys, present, strict=True) if not p], host_chunks)
        if device_blocks:
            _store(dev, list(reversed(_keys(prompt + out[:-1], block))), device_blocks)
    return tot


def _predict(trace, order, chunk, block, host_chunks, device_blocks):
    bpt = 1.0 / chunk  # one chunk = one byte, so a tier of n chunks is n bytes
    p = predict_tiers(
        trace,
        pool=1,
        bytes_per_token=bpt,
        chunk_tokens=chunk,
        device_tokens=device_blocks * block,
        tiers_gib=[host_chunks / GIB],
        order=order,
        block_tokens=block,
    )
    (row,) = p["tiers"]
    assert row["host_capacity_chunks"] == host_chunks
    return row


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    chunk=st.sampled_from([2, 4, 8]),
    block=st.sampled_from([1, 2, 4]),
    host_chunks=st.integers(0, 40),
    device_blocks=st.integers(0, 60),
    shuffle=st.booleans(),
)
def test_matches_brute_force_two_tier_lru(seed, chunk, block, host_chunks, device_blocks, shuffle):
    rng = np.random.default_rng(seed)
    tasks = agent_tasks(
        rng, n_tasks=int(rng.integers(1, 5)), n_calls=4, head=int(rng.integers(0, 9))
    )
    trace = make_trace(tasks)
    order = [c.ref for c in trace.calls]
    if shuffle:  # any interleaving that keeps each task's calls in order
        order = sorted(order, key=lambda r: (r[1] + rng.random() * 3, r[0]))
        order = [r for r in order]
    want = brute_force(tasks, order, chunk, block, host_chunks, device_blocks)
    got = _predict(trace, order, chunk, block, host_chunks, device_blocks)
    assert got["computed_prefill_tokens"] == want["computed"]
    assert got["host_restore_tokens"] == want["restore"]
    assert got["host_write_tokens"] == want["write"]
    assert got["host_coverage_tokens"] == want["coverage"]
    assert got["device_hit_tokens"] == want["device"]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), chunk=st.sampled_from([1, 3, 8]))
def test_unbounded_tier_computes_only_prompt_tokens_no_earlier_prompt_covers(seed, chunk):
    rng = np.random.default_rng(seed)
    tasks = agent_tasks(rng, n_tasks=3, n_calls=3, head=int(rng.integers(0, 12)))
    tasks["copy"] = tasks["t0"]  # a task that repeats another: whole prompts already seen
    trace = make_trace(tasks)
    prompts = [tasks[c.task][c.index][0] for c in trace.calls]
    expected = 0
    for i, p in enumerate(prompts):
        # an earlier prompt covers p up to their common prefix, in whole chunks of both; the
        # engine still computes the last prompt token of a fully covered prompt
        seen = max(
            (min(common_prefix(p, q), len(q)) // chunk * chunk for q in prompts[:i]), default=0
        )
        expected += len(p) - min(seen, len(p) - 1)
    got = predict_tiers(
        trace,
        pool=4,
        bytes_per_token=2.0,
        chunk_tokens=chunk,
        device_tokens=0,
        tiers_gib=[0, 1024],
        order="trace",  # one call after another: every earlier prompt is written before a lookup
    )
    zero, unbounded = got["tiers"]
    assert unbounded["computed_prefill_tokens"] == expected
    assert zero["computed_prefill_tokens"] == trace.prompt_tokens
    assert zero["host_restore_tokens"] == 0


def test_hand_worked_two_agents_evict_each_other():
    # Two agents alternate; prompts of 1-token chunks. 4 chunks hold one agent: nothing survives.
    # 8 chunks hold both first prompts, but A's second call writes chunk 9 and evicts B's head (the
    # least recent chunk), so B finds 6, 7, 8 without 5 and restores nothing. 10 chunks hold all.
    a1, b1 = [1, 2, 3, 4], [5, 6, 7, 8]
    tasks = {"a": [(a1, [9]), (a1 + [9], [])], "b": [(b1, [9]), (b1 + [9], [])]}
    trace = make_trace(tasks)
    order = [("a", 0), ("b", 0), ("a", 1), ("b", 1)]
    p = predict_tiers(
        trace,
        pool=2,
        bytes_per_token=1.0,
        chunk_tokens=1,
        device_tokens=0,
        tiers_gib=[4 / GIB, 8 / GIB, 10 / GIB],
        order=order,
    )
    got = [
        (t["host_restore_tokens"], t["computed_prefill_tokens"], t["host_write_tokens"])
        for t in p["tiers"]
    ]
    assert got == [(0, 18, 18), (4, 14, 11), (8, 10, 10)]
    assert p["offload_pays_from_gib"] is None  # 8 restored never reach the 10 written


def test_offload_pays_from_matches_brute_force_search():
    rng = np.random.default_rng(7)
    tasks = agent_tasks(rng, n_tasks=3, n_calls=6)
    trace = make_trace(tasks)
    order = sorted((c.ref for c in trace.calls), key=lambda r: (r[1], r[0]))
    pays = None
    for k in range(1, 400):  # an empty tier neither writes nor restores: it pays nothing
        b = brute_force(tasks, order, 2, 1, k, 0)
        if b["restore"] >= b["write"]:
            pays = k
            break
    assert pays is not None
    p = predict_tiers(
        trace,
        pool=3,
        bytes_per_token=0.5,
        chunk_tokens=2,
        device_tokens=0,
        tiers_gib=[],
        order=order,
    )
    assert p["offload_pays_from_gib"] * GIB == pytest.approx(pays)


def test_capacity_is_floor_of_bytes_over_chunk_bytes():
    assert host_capacity_chunks(1.0, 256, 24576) == GIB // (256 * 24576)
    assert host_capacity_chunks(0, 256, 24576) == 0


def test_a_capacity_past_64_bits_is_refused_not_overflowed():
    """A tiny bytes per token put inf chunks in a tier, and int() raised OverflowError."""
    with pytest.raises(ConfigError, match="bytes_per_token: a 1 GiB tier holds 4.19e\\+306 chunks"):
        host_capacity_chunks(1.0, 256, 1e-300)
    assert host_capacity_chunks(1.0, 1, 1e-9) == int(GIB / 1e-9)  # under 2**63: counted


def test_trace_and_pool_orders_and_bad_order():
    tasks = agent_tasks(np.random.default_rng(1), n_tasks=3, n_calls=3)
    trace = make_trace(tasks)
    kw = dict(pool=2, bytes_per_token=1.0, chunk_tokens=2, device_tokens=0, tiers_gib=[1e-6])
    assert predict_tiers(trace, **kw, order="trace")["order"] == "trace"
    assert predict_tiers(trace, **kw, order="pool")["calls"] == len(trace)
    with pytest.raises(ConfigError, match="run:DIR at the edge"):
        predict_tiers(trace, **kw, order="run:/nope")
    with pytest.raises(ConfigError, match="not in the trace"):
        predict_tiers(trace, **kw, order=[("zz", 0)])


def test_core_model_imports_no_network_plotting_or_engine_code():
    import subprocess
    import sys

    code = (
        "import sys; import replay.model.predict, replay.model.session, replay.model.economics; "
        "bad = ('httpx', 'aiohttp', 'asyncio', 'matplotlib', 'replay.driver', 'replay.sim', "
        "'replay.sweep', 'replay.engines'); print([m for m in bad if m in sys.modules])"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_predict_says_when_calls_do_not_fit_the_device(tmp_path):
    """A device smaller than a call: an engine refuses the call (the simulator answers 4xx) and a
    run counts none of its tokens, while the model counts them; predict said nothing."""
    from click.testing import CliRunner

    from replay.cli.main import cli
    from replay.trace.io import write_trace
    from replay.trace.synth import synth

    path = tmp_path / "t.jsonl"
    write_trace(synth("swe-agent", tasks=2, seed=1, scale=0.05, max_calls_per_task=3), path)
    base = ["predict", "--trace", str(path), "--pool", "1", "--bytes-per-token", "1024"]
    small = CliRunner().invoke(cli, [*base, "--device-tokens", "64"])
    assert small.exit_code == 0
    assert "of 6 calls need more than the device's 64 tokens" in small.output
    roomy = CliRunner().invoke(cli, [*base, "--device-tokens", "10000000"])
    assert roomy.exit_code == 0 and "need more than the device" not in roomy.output
