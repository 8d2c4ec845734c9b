"""The simulated serving engine: continuous batching over the device and host tiers.

Pure and synchronous: `schedule(now)` admits waiting requests and returns the next step plan (one
mixed step, or a stretch of decode-only steps that an arrival may cut short); `commit(plan, steps,
t)` applies the steps that ran. `replay.sim.runner` drives it on a clock. Same requests in the same
order at the same times give the same result, bit for bit.

Scheduling (vLLM-like): running decodes take one token each, then running prefills take chunks of
the remaining token budget, then waiting requests are admitted first come first served while seats
(`max_num_seqs`), budget and device blocks allow. Admission looks up the device prefix (full blocks,
at least one token left to compute), then the host tier; restored tokens load over the host link
(FIFO, shared with writes) before the request computes, while other requests go on computing; with
`blocking_transfers` every load and write instead stalls the engine's next step, as in vLLM's
KV-connector API (loads start before the forward, saves are waited for at its end). Blocks for the whole prefill are held from
admission; decode blocks are taken as sequences grow, and when none are left the newest running
request is preempted (its blocks freed, recomputed later).

This module holds intake, admission (tier lookups, block and host-link accounting) and commit
(applying the steps that ran, host writes, finishing); step planning is in `replay.sim.planning`,
the request record in `replay.sim.seq`.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from replay.counters import CANONICAL_COUNTERS, COMPUTED_PREFILL_TOKENS
from replay.sim.admission import DeclineReuse, Telemetry, make_admission
from replay.sim.cost import CostModel
from replay.sim.device import DeviceTier
from replay.sim.fitted_cost import FittedCostModel, load_costs
from replay.sim.host import HostTier
from replay.sim.options import SimConfig
from replay.sim.personality import SlotPersonality
from replay.sim.planning import Plan, StepPlanner
from replay.sim.seq import Seq

__all__ = ["Seq", "Plan", "SimEngine", "EXTRA_COUNTERS"]

EXTRA_COUNTERS = (
    "chunks_written",
    "chunks_evicted",
    "chunks_evicted_unread",
    "chunks_restored",
    "declined_writes",
    "declined_reused_within",
    "declined_reused_beyond",
    "declined_never_reused",
    "device_evicted_blocks",
    "requests",
    "rejected_requests",
)

_MAX_STRETCH = 4096


class SimEngine(StepPlanner):
    """Block manager + host tier + admission + cost model; the continuous-batching scheduler
    (`schedule`, step planning, preemption) is the `StepPlanner` it extends."""

    def __init__(self, cfg: SimConfig, debug: bool = False, stretch: bool = True):
        self.cfg = cfg
        self.debug = debug  # check every invariant after each step (tests)
        self.max_stretch = _MAX_STRETCH if stretch else 1  # 1: plan step by step (tests)
        self.B = cfg.block_tokens
        self.C = cfg.chunk_tokens
        self.R = cfg.chunk_tokens // cfg.block_tokens
        self.cost: CostModel | FittedCostModel = CostModel(
            cfg.model_preset,
            cfg.hardware_preset,
            cfg.tp,
            cfg.efficiency,
            cfg.attention_flops,
            cfg.step_overhead_s,
            cfg.host_link_efficiency,
            cfg.transfer_overhead_s,
        )
        self.request_overhead_s = 0.0
        if cfg.costs:
            fitted = FittedCostModel(load_costs(cfg.costs))
            self.cost, self.request_overhead_s = fitted, fitted.request_overhead_s
        # the engine reserves each request's keys once, at submit (see `submit`)
        self.device = DeviceTier(cfg.device_blocks, cfg.device_eviction, grow=False)
        # llamacpp: slots and a whole-prompt RAM tier replace block sharing and the chunked tier
        self.slots = SlotPersonality(cfg) if cfg.personality == "llamacpp" else None
        has_host = cfg.host_chunks > 0 and self.slots is None
        self.host = HostTier(cfg.host_chunks, grow=False) if has_host else None
        self.admission = make_admission(cfg)
        # `all` and `ttl` write every candidate: nothing is ever declined, so the reuse
        # distances of declined chunks need no bookkeeping (its counters stay 0)
        declines = self.host is not None and self.admission.may_decline
        self.declines = DeclineReuse(cfg.host_chunks) if declines else None
        self._rng = np.random.default_rng(cfg.seed) if cfg.jitter > 0 else None
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self.link_free_at = 0.0
        self.stall_s = 0.0  # blocking transfers not yet charged to a step
        self.pins: dict[str, tuple[np.ndarray, float]] = {}
        self._lookups: dict[int, int] = {}  # selective: times a chunk key was looked up
        self._pos = np.zeros(1024, dtype=np.int32)  # block index of each block key
        self._order = 0
        self.c: dict[str, int] = dict.fromkeys(CANONICAL_COUNTERS + EXTRA_COUNTERS, 0)

    # -- intake ---------------------------------------------------------------------------------

    def max_request_tokens(self) -> int:
        """Largest prompt + output a request may have: the device must hold it alone."""
        return min(self.cfg.max_model_len, self.device.capacity * self.B)

    def submit(self, seq: Seq, now: float) -> None:
        """Queue a request. The caller checked its size against `max_request_tokens`."""
        if len(seq.keys):
            n_keys = int(seq.keys.max()) + 1
            self.device.reserve(n_keys)
            if self.host is not None:
                self.host.reserve(n_keys)
            if self.cfg.write_policy == "write-back":
                self._note_positions(seq.keys)
        seq.arrival = now
        seq.state = "waiting"
        seq.prefill_len = seq.prompt_len
        self.c["requests"] += 1
        self.c["prompt_tokens"] += seq.prompt_len
        self.waiting.append(seq)

    def _note_positions(self, keys: np.ndarray) -> None:
        m = int(keys.max())
        if m >= len(self._pos):
            self._pos = np.concatenate(
                [self._pos, np.zeros(max(len(self._pos), m + 1), dtype=np.int32)]
            )
        self._pos[keys] = np.arange(len(keys), dtype=np.int32)

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running)

    # -- admission ------------------------------------------------------------------------------

    def _allocate(self, n: int, now: float) -> None:
        evicted = self.device.allocate(n)
        assert evicted is not None
        self.c["device_evicted_blocks"] += len(evicted)
        if len(evicted) and self.host is not None and self.cfg.write_policy == "write-back":
            ends = evicted[self._pos[evicted] % self.R == self.R - 1]
            self._write(self.host.missing(ends), now)

    def _admit(self, s: Seq, now: float) -> bool:
        """Look up both tiers and take blocks for the prefill; False if the device cannot fit it."""
        if self.slots is not None:
            return self._admit_to_slot(s, now)
        L = s.prefill_len
        m = self.device.match(s.keys[: (L - 1) // self.B]) if self.cfg.enable_prefix_caching else 0
        hit = s.keys[:m]
        need = -(-L // self.B) - m
        avail = self.device.n_available
        # taking the hit makes its free blocks unevictable; the count is only needed when the
        # device could fit the request without them (a full device fails on `avail` alone)
        if need > avail or need > avail - self.device.free_among(hit):
            return False  # waits for blocks to free up (or TTL pins to expire, Continuum-like)
        self.device.acquire(hit)
        pin = self.pins.pop(s.task, None)
        if pin is not None:
            self.device.release(pin[0])
        self._allocate(need, now)
        s.held, s.anon = m, need
        d = m * self.B
        r = 0
        r_chunks = 0  # host chunks the restore reads
        n_chunks = min(s.prompt_len, L) // self.C
        chunk_keys = s.keys[self.R - 1 : n_chunks * self.R : self.R]
        if not s.admitted and self.cfg.write_policy == "selective":
            lk = self._lookups
            for k in chunk_keys.tolist():
                lk[k] = lk.get(k, 0) + 1
        if self.host is not None:
            h = self.host.lookup(chunk_keys)
            if self.cfg.write_policy == "write-back" and h < d // self.C:
                # write-back writes a chunk only when the device evicts it, so the head the
                # device still holds is in no host run from the prompt start: the prefix the
                # two tiers hold together (as SGLang HiCache's radix tree matches over device and
                # host nodes) goes on from the device's whole chunks into the host's
                h = d // self.C + self.host.present_run(chunk_keys[d // self.C :])
            if not s.admitted:
                self._decide(s, h * self.C, chunk_keys, now)
            r = max(0, min(h * self.C, L - 1) - d)
            if r:
                first, last = d // self.C, (d + r - 1) // self.C
                self.host.mark_read(chunk_keys[first : last + 1])
                r_chunks = last - first + 1
                self.c["chunks_restored"] += r_chunks
        self._start(s, now, d, r, r_chunks)
        return True

    def _admit_to_slot(self, s: Seq, now: float) -> bool:
        """llamacpp: take an idle slot; reuse what the slot or a RAM entry shares with the prompt."""
        need = -(-s.prefill_len // self.B)
        if need > self.device.n_available:
            return False
        assert s.prompt_ids is not None, "the llamacpp personality needs the prompt's token ids"
        a = self.slots.admit(s.prompt_ids) if self.slots is not None else None
        if a is None:
            return False  # every slot is busy
        self._allocate(need, now)
        s.held, s.anon, s.slot = 0, need, a.slot
        # no host-write admission here: llama.cpp's RAM tier stores every finished prompt whole
        r = a.host_restore_tokens
        self._start(s, now, a.device_hit_tokens, r, 1 if r else 0)
        return True

    def _start(self, s: Seq, now: float, d: int, r: int, r_chunks: int) -> None:
        """Count an admission of `d` device-hit and `r` restored tokens and start the request:
        its restore (if any) queues on the host link, its fixed overhead (fitted costs) runs
        beside the other requests' compute."""
        L = s.prefill_len
        self.c["device_hit_tokens"] += d
        self.c["host_restore_tokens"] += r
        self.c[COMPUTED_PREFILL_TOKENS] += L - d - r
        if not s.admitted:
            s.device_hit_tokens, s.host_restore_tokens = d, r
            s.admitted = True
        s.computed = d + r
        s.order = self._order
        self._order += 1
        self.running.append(s)
        ready = now + self.request_overhead_s
        if r and not self.cfg.blocking_transfers:
            start = max(ready, self.link_free_at)
            s.ready_at = start + self.cost.transfer_s(r, r_chunks)
            self.link_free_at = s.ready_at
            s.state = "loading"
        else:
            if r:
                self.stall_s += self.cost.transfer_s(r, r_chunks)
            s.ready_at = ready
            s.state = "loading" if ready > now else "prefill"

    def _decide(self, s: Seq, held_tokens: int, chunk_keys: np.ndarray, now: float) -> None:
        """The admission's one decision for `s` (first lookup), on the tier's live telemetry."""
        if self.declines is None:  # an admission that admits everything: nothing to ask
            return
        host = self.host
        assert host is not None
        tel = Telemetry(host.size / host.capacity, host.last_evict_at, now)
        s.write_ok = self.admission.admit(s.task, s.prompt_len, held_tokens, now, tel)
        self.declines.reference(chunk_keys)

    # -- applying steps -------------------------------------------------------------------------

    def commit(self, plan: Plan, steps: int, t_end: float) -> list[Seq]:
        """Apply the first `steps` steps of `plan`, the last ending at `t_end`; return finished."""
        done: list[Seq] = []
        if plan.chunk_steps is not None:
            for step in plan.chunk_steps[:steps]:
                for s, n in step:
                    s.computed += n
        B = self.B
        total = 0  # blocks the decodes' new tokens need beyond what they hold
        for s in plan.decode:
            kv = s.kv + steps
            n = -(-kv // B) - s.held - s.anon
            if n > 0:
                s.anon += n
                total += n
            s.kv = kv
            s.generated += steps
            if s.generated >= s.output_len:
                done.append(s)
        if total:  # taken before any prefill completes below, as step-by-step scheduling would
            self._allocate(total, t_end)
        if plan.chunk_steps is not None:
            for s, _ in plan.chunk_steps[steps - 1]:
                if s.state == "prefill" and s.computed >= s.prefill_len:
                    self._prefill_done(s, t_end)
                    if s.generated >= s.output_len:
                        done.append(s)
        for s in done:
            self._finish(s, t_end)
        if self.debug:
            self.check()
        return done

    def _prefill_done(self, s: Seq, t: float) -> None:
        s.kv = s.prefill_len
        full = s.kv // self.B
        self._register(s, full)
        s.state = "decode"
        s.generated += 1
        if s.t_first is None:
            s.t_first = t
            if s.on_first is not None:
                s.on_first(s)
        if self.host is not None and self.cfg.write_policy != "write-back":
            n_chunks = s.prompt_len // self.C
            keys = s.keys[self.R - 1 : n_chunks * self.R : self.R]
            cand = self.host.missing(keys)
            if self.cfg.write_policy == "selective":
                lk = self._lookups
                cand = cand[[lk.get(k, 0) >= 2 for k in cand.tolist()]]
            if s.write_ok:
                self._write(cand, t)
            else:
                self._decline(cand)

    def _register(self, s: Seq, full_blocks: int) -> None:
        if not self.cfg.enable_prefix_caching:
            return  # the blocks stay the request's own and are freed with it
        new = s.keys[s.held : full_blocks]
        if len(new):
            self.device.register(new)
            s.held += len(new)
            s.anon -= len(new)

    def _write(self, cand: np.ndarray, now: float) -> None:
        if not len(cand) or self.host is None:
            return
        chosen = self.admission.select(cand, now)
        if len(chosen) < len(cand):
            self._decline(cand[len(chosen) :])
        if not len(chosen):
            return
        self.host.write(chosen, now)
        t = self.cost.transfer_s(len(chosen) * self.C, len(chosen))
        if self.cfg.blocking_transfers:
            self.stall_s += t
        else:
            self.link_free_at = max(now, self.link_free_at) + t

    def _decline(self, keys: np.ndarray) -> None:
        self.c["declined_writes"] += len(keys)
        if self.declines is not None and len(keys):
            self.declines.declined(keys)

    def _finish(self, s: Seq, t: float) -> None:
        self._register(s, min(s.kv // self.B, len(s.keys)))
        self.device.free_anon(s.anon)
        s.anon = 0
        held = s.keys[: s.held]
        if self.cfg.admission == "ttl" and self.cfg.ttl_s > 0:
            old = self.pins.pop(s.task, None)
            if old is not None:
                self.device.release(old[0])
            self.pins[s.task] = (held, t + self.cfg.ttl_s)
        else:
            self.device.release(held)
        s.held = 0
        if self.slots is not None and s.prompt_ids is not None:
            self.slots.release(s.slot, s.prompt_ids, s.output_len, t)
        s.state = "done"
        s.t_end = t
        if s.t_first is None:
            s.t_first = t
        self.c["output_tokens"] += s.output_len
        self.running.remove(s)
        if s.on_done is not None:
            s.on_done(s)

    # -- outside ------------------------------------------------------------------------------

    def cancel(self, s: Seq) -> None:
        """The client went away. A request still waiting leaves the queue; a running one ends
        at its next token, as vLLM aborts it, except that a prefill (or restore) in progress
        completes first: the simulator does not take back part of a planned step. Its blocks
        are then freed as any finished request's, and only the tokens made are counted."""
        if s.state == "waiting":
            self.waiting.remove(s)
            s.state = "cancelled"
        elif s.state != "done":
            s.output_len = max(1, min(s.output_len, s.generated))

    def reset_prefix_cache(self) -> None:
        """Drop cached free device blocks, TTL pins and the host tier (held blocks stay)."""
        for keys, _ in self.pins.values():
            self.device.release(keys)
        self.pins.clear()
        self.device.clear()
        if self.host is not None:
            self.host.clear()
        if self.slots is not None:
            self.slots.clear()

    def counters(self) -> dict[str, int]:
        """Canonical counters (docs/architecture.md) plus the simulator's extras (cumulative)."""
        c = dict(self.c)
        if self.host is not None:
            c["chunks_written"] = self.host.chunks_written
            c["chunks_evicted"] = self.host.chunks_evicted
            c["chunks_evicted_unread"] = self.host.chunks_evicted_unread
        if self.declines is not None:
            c["declined_reused_within"] = self.declines.within
            c["declined_reused_beyond"] = self.declines.beyond
            c["declined_never_reused"] = self.declines.never
        c["host_write_tokens"] = c["chunks_written"] * self.C
        c["host_evicted_tokens"] = c["chunks_evicted"] * self.C
        if self.slots is not None:
            c.update(self.slots.host_counters())
        return c

    def check(self) -> None:
        """Invariants (capacity, refcounts, queue) of both tiers; AssertionError on violation."""
        self.device.check()
        if self.host is not None:
            self.host.check()
        anon = sum(s.anon for s in self.running)
        assert anon == self.device.n_anon, "anonymous blocks out of sync"
        refs = np.zeros(len(self.device._refcnt), dtype=np.int64)
        for s in self.running:
            np.add.at(refs, s.keys[: s.held], 1)
        for keys, _ in self.pins.values():
            np.add.at(refs, keys, 1)
        assert (refs == self.device._refcnt).all(), "refcounts differ from the blocks held"
