"""Reference engine simulator: device and host KV tiers, admission policies, roofline timing.

`SimConfig` (options), `SimTransport` (in process, virtual time) and `replay sim serve` (HTTP) share
one engine (`replay.sim.engine.SimEngine`).
"""
