"""Fit the simulator's cost model (`replay.sim.fitted_cost`) to per-call records of real runs.

Pure: call rows in, coefficients and residuals out. Two non-negative least-squares fits:

1. Time to first token, from the moment the call could start (its service start: the engine
   serves at most `servers` calls at once, first come first served, so a call sent while all are
   busy starts when the earliest of them ends):
   `ttft_service = overhead + a * computed + b * pairs + c * restored`, with
   `pairs = computed * cached + computed (computed + 1) / 2` (the attention term, growing with
   context) and `restored` the tokens loaded from the host tier.
2. Decode: a call's decode time `t_end - t_first` over `steps = completion - 1` steps, less the
   prefill work of other calls that ran inside it (their fitted prefill time, pro rata of their
   prefill window's overlap), is `d0 * steps + d1 * steps * batch`, where `batch` is the
   time-weighted number of calls decoding during its decode window (itself included).

The per-chunk restore cost is fitted only where restores come in chunks (`chunk_tokens` > 0); a
whole-prompt tier (llama.cpp) moves one entry per restore and folds it into the overhead.

With `per_run_speed`, each run also gets a speed factor: on a shared machine other processes take
the CPU for a whole run at a time, which stretches every one of its costs by about the same
factor. The fit then alternates the pooled costs (on each run's times divided by its factor) with
each run's factor (the least-squares scale between its times and the costs' prediction), the
factors normalised to a median of 1: the costs are those of the median fitted run, and a slow
run no longer drags them.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import nnls

from replay.sim.fitted_cost import FittedCosts

__all__ = ["CallRow", "FitResult", "fit_costs", "fit_speed", "service_starts"]


@dataclass(frozen=True)
class CallRow:
    """One finished call of a real run, times in seconds since the run's start."""

    t_send: float
    t_first: float
    t_end: float
    prompt_tokens: int
    cached_tokens: int
    restored_tokens: int
    completion_tokens: int


@dataclass
class FitResult:
    costs: FittedCosts
    calls: int
    ttft_residual_rms_s: float
    ttft_residual_rel: float  # rms / mean of the fitted times to first token
    decode_residual_rms_s: float
    decode_residual_rel: float
    notes: list[str] = field(default_factory=list)
    speeds: list[float] = field(default_factory=list)  # per run, time / median run's time
    fits: bool = True  # False: the times left for the costs are <= 0 on average (no model)

    def summary(self) -> dict[str, float | int | str]:
        return {
            "calls": self.calls,
            "ttft_residual_rms_s": self.ttft_residual_rms_s,
            "ttft_residual_rel": self.ttft_residual_rel,
            "decode_residual_rms_s": self.decode_residual_rms_s,
            "decode_residual_rel": self.decode_residual_rel,
            "notes": "; ".join(self.notes),
        }


def service_starts(rows: Sequence[CallRow], servers: int) -> np.ndarray:
    """When each call's service began: FCFS over `servers` seats, a seat freed at a call's end.
    (Per run: the rows of one run only.)"""
    order = sorted(range(len(rows)), key=lambda i: (rows[i].t_send, rows[i].t_first))
    free = [0.0] * servers
    starts = np.zeros(len(rows))
    for i in order:
        t = heapq.heappop(free)
        starts[i] = max(rows[i].t_send, t)
        heapq.heappush(free, max(starts[i], rows[i].t_end))
    return starts


def _nnls(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Non-negative least squares with columns scaled to unit norm (coefficients differ by
    orders of magnitude); zero columns get a zero coefficient. Returns (coef, residuals)."""
    norms = np.linalg.norm(x, axis=0)
    keep = norms > 0
    coef = np.zeros(x.shape[1])
    if keep.any() and len(y):
        sol, _ = nnls(x[:, keep] / norms[keep], y)
        coef[keep] = sol / norms[keep]
    return coef, y - x @ coef


def _overlap(a0: float, a1: float, b0: np.ndarray, b1: np.ndarray) -> np.ndarray:
    return np.clip(np.minimum(a1, b1) - np.maximum(a0, b0), 0.0, None)


@dataclass
class _Run:
    """One run's calls as arrays, with the windows the fit needs."""

    start: np.ndarray  # service start
    t_first: np.ndarray
    t_end: np.ndarray
    x: np.ndarray  # prefill design: 1, computed, pairs, restored[, restored chunks]
    steps: np.ndarray  # decode steps (completion - 1)

    @property
    def n(self) -> int:
        return len(self.start)


def _prepare(rows: Sequence[CallRow], servers: int, chunk_tokens: int) -> _Run:
    computed = np.array([r.prompt_tokens - r.cached_tokens for r in rows], dtype=np.float64)
    cached = np.array([r.cached_tokens for r in rows], dtype=np.float64)
    restored = np.array([r.restored_tokens for r in rows], dtype=np.float64)
    pairs = computed * cached + computed * (computed + 1) / 2
    cols = [np.ones(len(rows)), computed, pairs, restored]
    if chunk_tokens > 0:
        cols.append(np.ceil(restored / chunk_tokens))
    return _Run(
        start=service_starts(rows, servers),
        t_first=np.array([r.t_first for r in rows], dtype=np.float64),
        t_end=np.array([r.t_end for r in rows], dtype=np.float64),
        x=np.column_stack(cols),
        steps=np.array([max(r.completion_tokens - 1, 0) for r in rows], dtype=np.float64),
    )


def _intrusions(
    run: _Run, cp: np.ndarray, cd: np.ndarray, batch_tokens: int
) -> tuple[np.ndarray, ...]:
    """Per call: others' compute inside its prefill, others' prefill inside its decode window, and
    its decode batch (time-weighted, itself included). A call computes its prompt from the end of
    its fixed overhead and restore (which other calls' compute overlaps) to its first token;
    another call's prefill (the compute part, a * computed + b * pairs) fills the steps that end
    at its first token, so it takes the last that many seconds before it."""
    prefill_s = run.x[:, 1:3] @ cp[1:3]
    waits = run.x[:, [0, *range(3, run.x.shape[1])]] @ cp[[0, *range(3, run.x.shape[1])]]
    c_start = np.minimum(run.start + waits, run.t_first)
    # a prefill runs in the step(s) that end at its first token: its last prefill_s seconds
    p_start = np.maximum(run.t_first - prefill_s, c_start)
    p_win = np.maximum(run.t_first - p_start, 1e-12)
    d_win = run.t_end - run.t_first
    n = run.n
    batch = np.ones(n)
    for i in range(n):
        if d_win[i] > 0:
            ov = _overlap(run.t_first[i], run.t_end[i], run.t_first, run.t_end)
            ov[i] = 0.0
            batch[i] = 1.0 + ov.sum() / d_win[i]
    into_prefill, into_decode = np.zeros(n), np.zeros(n)
    for i in range(n):
        others = np.arange(n) != i
        ov_p = _overlap(c_start[i], run.t_first[i], p_start, run.t_first)
        into_prefill[i] = (prefill_s * ov_p / p_win)[others].sum()
        # calls decoding when its prefill ends shared its steps: one decode step per prefill
        # step, plus on average half of the step in progress when it arrived and, if it then
        # waited (overhead, restore), half of the one in progress when it was ready
        dec = others & (run.t_first < run.t_first[i]) & (run.t_end >= run.t_first[i])
        if dec.any():
            k = np.ceil(max(run.x[i, 1], 1.0) / batch_tokens) + (1.0 if waits[i] > 0 else 0.5)
            into_prefill[i] += k * (cd[0] + cd[1] * dec.sum())
        ov_dp = _overlap(run.t_first[i], run.t_end[i], p_start, run.t_first)
        into_decode[i] = (prefill_s * ov_dp / p_win)[others].sum()
    return into_prefill, into_decode, batch


def _observed_and_predicted(
    run: _Run, parts: tuple[np.ndarray, ...], cp: np.ndarray, cd: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """A run's fitted times (service to first token, and decode, less other calls' work inside
    them) and what the costs `cp`, `cd` predict for them."""
    into_prefill, into_decode, batch = parts
    ok = run.steps >= 1
    observed = np.concatenate(
        [run.t_first - run.start - into_prefill, (run.t_end - run.t_first - into_decode)[ok]]
    )
    predicted = np.concatenate([run.x @ cp, (run.steps * (cd[0] + cd[1] * batch))[ok]])
    return observed, predicted


def _scale(observed: np.ndarray, predicted: np.ndarray) -> float:
    """The least-squares factor s of observed ~ s * predicted (1 when nothing is predicted)."""
    den = float(predicted @ predicted)
    return float(observed @ predicted) / den if den > 0 else 1.0


def fit_speed(
    rows: Sequence[CallRow],
    costs: FittedCosts,
    servers: int,
    chunk_tokens: int = 0,
    batch_tokens: int = 8192,
    rounds: int = 4,
) -> float:
    """How much slower than `costs` one run ran (its speed factor, 1 = as fitted), from its own
    records with the costs held fixed: the load the machine carried during that run."""
    run = _prepare(rows, servers, chunk_tokens)
    cp = np.array(
        [
            costs.request_overhead_s,
            costs.prefill_s_per_token,
            costs.attention_s_per_pair,
            costs.restore_s_per_token,
            *([costs.restore_s_per_chunk] if chunk_tokens > 0 else []),
        ]
    )
    cd = np.array([costs.decode_step_s, costs.decode_s_per_seq])
    speed = 1.0
    for _ in range(rounds):
        parts = _intrusions(run, cp * speed, cd * speed, batch_tokens)
        speed = _scale(*_observed_and_predicted(run, parts, cp, cd))
    return speed


def fit_costs(
    runs: Sequence[Sequence[CallRow]],
    servers: int,
    chunk_tokens: int = 0,
    batch_tokens: int = 8192,
    rounds: int = 6,
    per_run_speed: bool = False,
) -> FitResult:
    """Fit the cost model to the calls of `runs` (each a list of one run's rows) of an engine that
    serves up to `servers` calls at once. Other calls' work inside a call's windows depends on
    the costs being fitted, so the two fits alternate for `rounds` rounds (from none). With
    `per_run_speed`, each run gets its own speed factor too (module docstring)."""
    prepared = [_prepare(rows, servers, chunk_tokens) for rows in runs if rows]
    if not prepared:
        raise ValueError("no calls to fit")
    xp = np.vstack([r.x for r in prepared])
    cp, cd = np.zeros(xp.shape[1]), np.zeros(2)
    speeds = np.ones(len(prepared))
    notes: list[str] = []
    for _ in range(2 * rounds if per_run_speed else rounds):
        parts = [
            _intrusions(r, cp * v, cd * v, batch_tokens)
            for r, v in zip(prepared, speeds, strict=True)
        ]
        yp = np.concatenate(
            [
                (r.t_first - r.start - p[0]) / v
                for r, p, v in zip(prepared, parts, speeds, strict=True)
            ]
        )
        cp, res_p = _nnls(xp, yp)
        parts = [
            _intrusions(r, cp * v, cd * v, batch_tokens)
            for r, v in zip(prepared, speeds, strict=True)
        ]
        xd, yd = [], []
        for r, (_, into_decode, batch), v in zip(prepared, parts, speeds, strict=True):
            ok = r.steps >= 1
            xd.append(np.column_stack([r.steps, r.steps * batch])[ok])
            yd.append(((r.t_end - r.t_first - into_decode) / v)[ok])
        x_d, y_d = np.vstack(xd), np.concatenate(yd)
        if len(y_d):
            cd, res_d = _nnls(x_d, y_d)
        else:
            res_d = np.zeros(0)
        if per_run_speed:
            speeds = np.array(
                [
                    _scale(*_observed_and_predicted(r, p, cp, cd))
                    for r, p in zip(prepared, parts, strict=True)
                ]
            )
            speeds = np.where(speeds > 0, speeds, 1.0)
            median = float(np.median(speeds))
            speeds, cp, cd = speeds / median, cp * median, cd * median
    if not len(y_d):
        notes.append("no call decoded more than one token: decode costs are 0")
    if not (xp[:, 3] > 0).any():
        notes.append("no restores in the fitted runs: restore cost is 0")
    elif chunk_tokens > 0 and np.allclose(xp[:, 4] * chunk_tokens, xp[:, 3]):
        # every restore is whole chunks: tokens = chunks x chunk_tokens, one column twice
        notes.append(
            "every restore was whole chunks: restore_s_per_token and restore_s_per_chunk cannot "
            f"be told apart, only their sum per token (per chunk / {chunk_tokens}) is measured"
        )
    if len(y_d) and servers == 1:
        notes.append(
            "one seat, so one call a decode step: decode_step_s and decode_s_per_seq cannot be "
            "told apart, only their sum is measured"
        )
    elif servers > 1:
        notes.append(
            f"{servers} seats: the model of calls sharing steps is approximate (docs/simulator.md: "
            "fitted to the simulator's own runs, single costs come back 0.6x-2.4x at 2 seats, "
            "prefill 0 at 3); judge the costs by the fit points' own errors"
        )
    costs = FittedCosts(
        request_overhead_s=float(cp[0]),
        prefill_s_per_token=float(cp[1]),
        attention_s_per_pair=float(cp[2]),
        restore_s_per_token=float(cp[3]),
        restore_s_per_chunk=float(cp[4]) if chunk_tokens > 0 else 0.0,
        decode_step_s=float(cd[0]),
        decode_s_per_seq=float(cd[1]),
    )

    def rms(r: np.ndarray) -> float:
        return float(np.sqrt(np.mean(r**2))) if len(r) else 0.0

    def rel(r: np.ndarray, y: np.ndarray) -> float:
        # NaN (null in JSON, "-" printed): no mean to be relative to
        return rms(r) / float(np.mean(y)) if len(y) and np.mean(y) > 0 else math.nan

    fits = not (len(yp) and not np.mean(yp) > 0)
    if not fits:
        notes.append(
            "the fitted calls' time to first token, less the other calls' work the model puts "
            "before it, is <= 0 on average: these runs' timings do not fit the cost model"
        )

    return FitResult(
        costs=costs,
        calls=len(yp),
        ttft_residual_rms_s=rms(res_p),
        ttft_residual_rel=rel(res_p, yp),
        decode_residual_rms_s=rms(res_d),
        decode_residual_rel=rel(res_d, y_d),
        notes=notes,
        speeds=[float(v) for v in speeds],
        fits=fits,
    )
