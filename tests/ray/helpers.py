"""Shared pieces of the Ray tier: small sim-server / sim experiments and the comparison of a Ray
sweep's summary with a sequential sweep's."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson
import pandas as pd

from replay.counters import CANONICAL_COUNTERS
from replay.sweep.config import Experiment, load_experiment

# A small Ray footprint for a shared 2-core, 24 GiB machine.
OBJECT_STORE_BYTES = 96 * 1024**2

TEMPLATE = """
name = "{name}"
repeats = 2
seed = 5
[trace]
synth = {{ preset = "swe-agent", tasks = 4, seed = 1, max_calls_per_task = 5, max_prompt_tokens = 20000 }}
[run]
pool = {pool}
gap_scale = 0.0
server_gone_grace_s = 0.5
interrupt_grace_s = 0.2
[engine]
kind = "{engine}"
tp = 8
device_kv_gib = 0.5
{engine_extra}
[matrix]
host_tier_gib = [0, 1, 4]
[timeouts]
ready_s = 120
stop_grace_s = 5
scrape_interval_s = 0.5
[predict]
enabled = false
"""


def experiment(
    tmp_path: Path, engine: str = "sim-server", name: str = "e", **cluster
) -> Experiment:
    # a server in real time sees a pool's requests in whatever order they arrive, so its counters
    # are exact only for one agent at a time; the virtual-time `sim` is exact with any pool
    extra, pool = ("time_scale = 0.0", 1) if engine == "sim-server" else ("", 2)
    path = tmp_path / f"{name}.toml"
    path.write_text(TEMPLATE.format(name=name, engine=engine, engine_extra=extra, pool=pool))
    exp = load_experiment(path)
    if cluster:
        exp = dataclasses.replace(exp, cluster=dataclasses.replace(exp.cluster, **cluster))
    return exp


def comparable(summary: Path, extra: tuple[str, ...] = ()) -> pd.DataFrame:
    """The columns a Ray sweep must reproduce: which run, its status and every counter."""
    df = pd.read_parquet(summary)
    cols = ["point", "repeat", "host_tier_gib", "engine", "status", *CANONICAL_COUNTERS, *extra]
    return df[cols].sort_values(["point", "repeat"]).reset_index(drop=True)


def nodes_of(exp_dir: Path) -> dict[str, str]:
    """run directory -> the node recorded in its run.json."""
    out = {}
    for p in sorted(exp_dir.glob("*/r*/run.json")):
        doc = orjson.loads(p.read_bytes())
        out[f"{p.parent.parent.name}/{p.parent.name}"] = doc["provenance"]["node"]
    return out
