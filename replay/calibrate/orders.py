"""Predict a point as the mean over several simulated call orders, not one.

A real engine serves calls in an order its own timing picks: the agents of a closed-loop pool
send their first calls at the same instant and whichever reaches the server first takes a slot,
and a call that ends a millisecond earlier hands its slot (and, on llama.cpp, the RAM tier's
least recently used entry) to another waiting call. Between repeats of one point that order
differs, and with a host tier smaller than the working set it decides which prompts are still
held: on a quiet llama.cpp CPU sweep the 4 MiB point's computed prefill moved by 8% between
three repeats, 16 of its 36 calls reusing a different prefix in one repeat than in another. A simulator with fixed costs
follows one order, so a prediction from it lands anywhere inside that spread.

`simulate_orders` runs the point `orders` times: the trace as recorded with no noise (order 0,
the single prediction `orders = 1` gives), then the tasks' start order shuffled (a seeded
permutation of the pool's root tasks, as the server may see the first sends) with a seeded
+-`ORDER_JITTER` stretch of every planned step (replay.sim.engine's `jitter`), and reports the
mean of each total with its min and max over the orders. The jitter stands for the run-to-run
variation of a step's time on a shared CPU; its mean is 1, so the costs stay as fitted on average.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from replay.errors import ConfigError
from replay.trace.model import Trace

__all__ = ["ORDER_JITTER", "MAX_ORDERS", "permuted_trace", "simulate_orders", "check_orders"]

# per-step service noise of the shuffled orders: large enough to flip near-ties between calls
# (on the quiet llama.cpp CPU sweep a point's repeats differ by up to 18% in median time between
# tokens), small enough to leave each step's cost recognisable
ORDER_JITTER = 0.1
MAX_ORDERS = 64


def check_orders(orders: int) -> int:
    """`orders` if it is a whole number in [1, MAX_ORDERS]; ConfigError naming the option else."""
    if isinstance(orders, bool) or not isinstance(orders, int) or not 1 <= orders <= MAX_ORDERS:
        raise ConfigError(
            "calibrate", "--orders", f"must be a whole number in [1, {MAX_ORDERS}], got {orders!r}"
        )
    return orders


def permuted_trace(trace: Trace, seed: int) -> Trace:
    """The same calls with the root tasks in a seeded random order (each task's calls, and any
    sub-task after its parent, unchanged): the pool starts its slots in this order."""
    roots = trace.root_task_ids
    rank = {t: i for i, t in enumerate(np.random.default_rng(seed).permutation(roots).tolist())}
    by_root: dict[str, str] = {}
    for call in trace.calls:  # a sub-task sorts with the root it descends from
        if call.task not in by_root:
            parent = call.parent[0] if call.parent is not None else call.task
            by_root[call.task] = by_root.get(parent, call.task)
    order = sorted(
        range(len(trace.calls)), key=lambda i: (rank.get(by_root[trace.calls[i].task], 0), i)
    )
    return Trace(trace.header, [trace.calls[i] for i in order], trace.path)


def simulate_orders(
    simulate: Callable[[Trace, Mapping[str, Any]], Mapping[str, Any]],
    trace: Trace,
    sim_kw: Mapping[str, Any],
    orders: int,
    keys: Sequence[str],
) -> dict[str, Any]:
    """`simulate(trace, sim_kw)` over `orders` call orders (module docstring): the mean of each
    of `keys` (None where no order gave a number), and `spread`: each key's [min, max]."""
    runs = [simulate(trace, sim_kw)]
    for seed in range(1, check_orders(orders)):
        kw = {**sim_kw, "jitter": ORDER_JITTER, "seed": seed}
        runs.append(simulate(permuted_trace(trace, seed), kw))
    out: dict[str, Any] = {"orders": orders, "spread": {}}
    for key in keys:
        vals = [float(r[key]) for r in runs if r.get(key) is not None]
        out[key] = float(np.mean(vals)) if vals else None
        out["spread"][key] = [min(vals), max(vals)] if vals else None
    return out
