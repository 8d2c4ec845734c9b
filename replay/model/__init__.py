"""The working-set model: predictions of where a pool's KV lives, made before a run.

Modules (import them directly; this package imports nothing, so `replay.model.presets` stays cheap
for the simulator and the CLI):
- `closed_form`: reuse working set `(A - 1) * N * beta` and pressure ratios.
- `economics`: compute per host-link byte, recompute vs restore time, offload benefit ratio.
- `stackdist`: LRU stack distances of a call-grouped key stream (numba Fenwick tree).
- `streams`: prefix-chained integer keys of every call's prompt chunks and context blocks.
- `service`: the closed loop's stand-in server: per-call prices (flat rates or a per-step
  roofline priced for the batch in flight) and the engine's admission queue.
- `order`: schedules (when each call looks up, finishes its prefill, ends): trace, closed loop.
- `lru_events`: device and host LRU tiers driven by a schedule.
- `tier_model`: one schedule's device pass and host passes (`TierModel`).
- `ranges`: the pre-registered low/high: the model under bounding schedules, and per-tier queued
  schedules.
- `predict`: `predict_tiers`, the per-tier prediction the sweep pre-registers.
- `run_order`: the edge that reads a recorded run's schedule from its calls.parquet/jsonl.
- `session`: the explainer's whole-session model.
- `presets`: hardware and model presets (shared with the simulator).
"""
