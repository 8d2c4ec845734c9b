"""Step planning of the simulated engine: which requests compute in the next step(s), for how long.

Each call plans one mixed step, or a stretch of steps whose shape cannot change before its end (a
decode-only stretch, or prefill chunks repeated until one completes), so the runner advances the
clock once per stretch rather than once per step; an arrival or a timer cuts a stretch short.
When running decodes need more device blocks than are free, TTL pins are dropped first, then the
newest running request is preempted. `StepPlanner` is a mixin of `SimEngine`: planning reads and
changes the engine's own state, and admission and commit (replay.sim.engine) stay beside intake.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from itertools import accumulate
from typing import TYPE_CHECKING

import numpy as np

from replay.sim.seq import Seq

if TYPE_CHECKING:
    from replay.sim.cost import CostModel
    from replay.sim.device import DeviceTier
    from replay.sim.fitted_cost import FittedCostModel
    from replay.sim.options import SimConfig
    from replay.sim.personality import SlotPersonality

__all__ = ["Plan", "StepPlanner"]


@dataclass
class Plan:
    """The next step(s): `cum` holds the end offset (s) of each step after `start`."""

    start: float
    cum: np.ndarray
    chunk_steps: list[list[tuple[Seq, int]]] | None = None  # prefill chunks of each step
    decode: list[Seq] = field(default_factory=list)
    interruptible: bool = False


class StepPlanner:
    """The scheduler half of `SimEngine` (what each step computes); the engine holds the state."""

    # the engine's state that planning reads and changes (set in SimEngine.__init__)
    cfg: SimConfig
    B: int
    max_stretch: int
    cost: CostModel | FittedCostModel
    device: DeviceTier
    slots: SlotPersonality | None
    waiting: deque[Seq]
    running: list[Seq]
    pins: dict[str, tuple[np.ndarray, float]]
    stall_s: float
    _rng: np.random.Generator | None
    c: dict[str, int]

    if TYPE_CHECKING:  # admission and block allocation live in SimEngine

        def _admit(self, s: Seq, now: float) -> bool: ...

        def _allocate(self, n: int, now: float) -> None: ...

    def next_timer(self) -> float | None:
        """Earliest time something happens without an arrival: a restore lands, a pin expires."""
        t = None
        for s in self.running:  # a loop, not a list and min(): called at every plan
            if s.state == "loading" and (t is None or s.ready_at < t):
                t = s.ready_at
        for _, exp in self.pins.values():
            if t is None or exp < t:
                t = exp
        return t

    def schedule(self, now: float) -> Plan | None:
        """Admit what fits and plan the next step(s); None when nothing can compute now.

        Blocking transfers made since the last plan lengthen its first step (every step of a
        plan runs at least its first, so the stall is charged exactly once)."""
        plan = self._plan(now)
        stall, self.stall_s = self.stall_s, 0.0
        if not stall:
            return plan
        if plan is None:  # the engine has nothing to compute but still waits for the copies
            return Plan(now, np.array([stall]))
        plan.cum = plan.cum + stall
        return plan

    def _plan(self, now: float) -> Plan | None:
        if self.pins:
            self._expire_pins(now)
        B = self.B
        decode: list[Seq] = []
        prefills: list[Seq] = []
        for s in self.running:  # one pass: restores that landed, the decodes and the prefills
            state = s.state
            if state == "decode":
                decode.append(s)
            elif state == "prefill":
                prefills.append(s)
            elif state == "loading" and s.ready_at <= now:
                s.state = "prefill"
                prefills.append(s)
        while True:
            # blocks each decode needs for one more token (written out inline: a hot path)
            one = [d if (d := -(-(s.kv + 1) // B) - s.held - s.anon) > 0 else 0 for s in decode]
            need = sum(one)
            if need <= self.device.n_available:
                break
            if not self._make_room(need):
                self._preempt(self.running[-1], now)
                decode = [s for s in self.running if s.state == "decode"]
                prefills = [s for s in self.running if s.state == "prefill"]
        if need:
            self._allocate(need, now)
            for s, n in zip(decode, one, strict=True):
                s.anon += n
        budget = self.cfg.max_num_batched_tokens - len(decode)
        chunks = False  # whether a prefill takes a chunk (_mixed_plan lays the chunks out)
        for s in prefills:
            if budget <= 0:
                break
            chunks = True
            budget -= min(s.prefill_len - s.computed, budget)
        while self.waiting and budget > 0 and len(self.running) < self.cfg.max_num_seqs:
            s = self.waiting[0]
            if not self._admit(s, now):
                # first come first served, except that a call whose task holds a TTL pin goes
                # ahead (Continuum): it reuses its pinned blocks instead of waiting behind them
                pinned = next((w for w in self.waiting if w.task in self.pins), None)
                if pinned is None or not self._admit(pinned, now):
                    if not self.running and self._pinned_for_good():
                        # nothing runs and no pin will expire (--ttl-s inf): waiting would never
                        # end, so unpin as decode pressure does
                        self._unpin_soonest()
                        continue
                    break
                s = pinned
            self.waiting.remove(s)
            if s.state == "prefill":
                chunks = True
                budget -= min(s.prefill_len - s.computed, budget)
        if chunks:
            return self._mixed_plan(now, decode)
        if not decode:
            return None
        # a decode-only stretch: until the first sequence finishes, a timer fires or blocks run
        # out; the first step's blocks are held already, commit takes those of later steps
        steps, ctx = self.max_stretch, 0
        for s in decode:  # one pass: the stretch's length and the context it starts from
            ctx += s.kv
            if (left := s.output_len - s.generated) < steps:
                steps = left
        steps = self._steps_that_fit(decode, steps)
        cum = self.cost.decode_cum_s(len(decode), ctx, steps)
        timer = self.next_timer()
        if timer is not None and timer > now:
            k = int(np.searchsorted(cum, timer - now, side="left")) + 1
            cum = cum[: max(1, k)]
        return Plan(now, cum, None, decode, interruptible=True)

    def _mixed_plan(self, now: float, decode: list[Seq]) -> Plan:
        """Steps with prefill chunks, repeated while their shape holds: every step gives each
        decode one token and the prefills their chunks in running order, up to the step where a
        prefill completes or a decode finishes (exactly what step-by-step scheduling would do,
        since nothing else can change before then). An arrival cuts it after the current step."""
        prefills = [s for s in self.running if s.state == "prefill"]
        rem = [s.prefill_len - s.computed for s in prefills]
        done_at = [s.computed for s in prefills]
        n_dec = len(decode)
        budget0 = self.cfg.max_num_batched_tokens - n_dec
        max_steps = self.max_stretch
        if decode:
            max_steps = min(max_steps, min(s.output_len - s.generated for s in decode))
        ctx = sum(s.kv for s in decode)
        steps: list[list[tuple[Seq, int]]] = []
        durs: list[float] = []
        while True:
            if steps and self.waiting and sum(rem) < budget0:
                break  # this step leaves budget over: a waiting request may join it
            b = budget0
            step: list[tuple[Seq, int]] = []
            work: list[tuple[int, int]] = []
            finished = False
            for i, s in enumerate(prefills):
                if b <= 0:
                    break
                n = min(rem[i], b)
                step.append((s, n))
                work.append((n, done_at[i]))
                rem[i] -= n
                done_at[i] += n
                b -= n
                finished = finished or rem[i] == 0
            steps.append(step)
            durs.append(self.cost.step_s(work, n_dec, ctx + n_dec * (len(steps) - 1)))
            if finished or len(steps) >= max_steps:
                break
        if decode and len(steps) > 1:
            steps = steps[: self._steps_that_fit(decode, len(steps))]
        # running sums left to right, as np.cumsum adds, without converting the list first
        cum = np.array(list(accumulate(durs[: len(steps)])))
        timer = self.next_timer()
        if timer is not None and timer > now and len(cum) > 1:
            k = int(np.searchsorted(cum, timer - now, side="left")) + 1
            cum = cum[: max(1, k)]
            steps = steps[: len(cum)]
        return Plan(now, cum, steps, decode, interruptible=len(cum) > 1)

    def service_factor(self) -> float:
        """Multiplier of the next planned stretch: 1 without jitter, else 1 + jitter * U(-1, 1)
        drawn from the engine's own seeded generator (repeats with other seeds differ)."""
        if self._rng is None:
            return 1.0
        return 1.0 + self.cfg.jitter * float(self._rng.uniform(-1.0, 1.0))

    def _steps_that_fit(self, decode: list[Seq], steps: int) -> int:
        B, avail = self.B, self.device.n_available
        need = 0
        for s in decode:
            if (n := -(-(s.kv + steps) // B) - s.held - s.anon) > 0:
                need += n
        if need <= avail:
            return steps
        kv = np.array([s.kv for s in decode], dtype=np.int64)
        have = np.array([s.held + s.anon for s in decode], dtype=np.int64)
        k = np.arange(1, steps + 1, dtype=np.int64)
        need = np.maximum(0, -(-(kv[None, :] + k[:, None]) // self.B) - have[None, :]).sum(axis=1)
        fit = int(np.searchsorted(need, self.device.n_available, side="right"))
        return max(1, fit)  # schedule() made room for at least one step

    def _make_room(self, need: int) -> bool:
        """Unpin TTL pins (soonest expiry first) until `need` blocks are available."""
        while self.pins and need > self.device.n_available:
            self._unpin_soonest()
        return need <= self.device.n_available

    def _pinned_for_good(self) -> bool:
        return bool(self.pins) and all(exp == math.inf for _, exp in self.pins.values())

    def _unpin_soonest(self) -> None:
        task = min(self.pins, key=lambda t: (self.pins[t][1], t))
        self.device.release(self.pins.pop(task)[0])

    def _preempt(self, s: Seq, now: float) -> None:
        self.device.release(s.keys[: s.held])
        self.device.free_anon(s.anon)
        s.held = s.anon = 0
        if self.slots is not None and s.prompt_ids is not None:
            self.slots.release(s.slot, s.prompt_ids, 0, now)  # the slot keeps its prompt
        s.computed = s.kv = 0
        s.prefill_len = s.prompt_len + s.generated
        s.state = "waiting"
        self.running.remove(s)
        self.waiting.appendleft(s)
        self.c["preemptions"] += 1

    def _expire_pins(self, now: float) -> None:
        if not self.pins:
            return
        due = sorted((exp, t) for t, (_, exp) in self.pins.items() if exp <= now)
        for _, t in due:
            self.device.release(self.pins.pop(t)[0])
