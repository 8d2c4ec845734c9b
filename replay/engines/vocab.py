"""Does a trace's token ids fit a model's vocabulary? Checked before a run sends anything.

An id at or past the model's `vocab_size` makes vLLM answer HTTP 400 to every call (and other
engines may index past their embedding table), so a trace recorded with another tokenizer would
fail a whole sweep call by call. The vocabulary is read from the model's `config.json`: the
model directory itself when the model is a local path, else the Hugging Face hub cache
(`HF_HUB_CACHE`, `HF_HOME/hub`, or ~/.cache/huggingface/hub), the files an engine would load.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

__all__ = [
    "is_local_model",
    "hub_cache_dir",
    "model_dir",
    "vocab_size",
    "trace_max_token_id",
    "vocab_problem",
]


def is_local_model(model: str) -> bool:
    """A filesystem path rather than a hub name ('org/name'): hub names never start with a dot
    (`.cache/tinyllama` is a folder not made yet) and have one slash at most."""
    return model.startswith(("/", ".", "~")) or model.count("/") > 1 or Path(model).is_dir()


def hub_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where huggingface_hub keeps downloaded repositories (its own precedence of variables)."""
    env = os.environ if env is None else env
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


def model_dir(model: str, env: Mapping[str, str] | None = None) -> Path | None:
    """The directory holding the model's config.json: the local path, or the hub cache snapshot
    that `refs/main` points to (any snapshot with a config.json otherwise); None when absent."""
    if is_local_model(model):
        path = Path(model).expanduser()
        return path if (path / "config.json").is_file() else None
    repo = hub_cache_dir(env) / ("models--" + model.replace("/", "--"))
    snapshots = repo / "snapshots"
    ref = repo / "refs" / "main"
    if ref.is_file():
        pinned = snapshots / ref.read_text().strip()
        if (pinned / "config.json").is_file():
            return pinned
    if snapshots.is_dir():
        for snap in sorted(snapshots.iterdir()):
            if (snap / "config.json").is_file():
                return snap
    return None


def vocab_size(model: str, env: Mapping[str, str] | None = None) -> int | None:
    """`vocab_size` of the model's config.json (or of its `text_config`, for multimodal models);
    None when the files are not here or do not say."""
    where = model_dir(model, env)
    if where is None:
        return None
    try:
        config = json.loads((where / "config.json").read_text())
    except (OSError, ValueError):
        return None
    for table in (config, config.get("text_config") or {}):
        size = table.get("vocab_size") if isinstance(table, dict) else None
        if isinstance(size, int) and not isinstance(size, bool) and size > 0:
            return size
    return None


def trace_max_token_id(trace) -> int | None:
    """The largest token id a replay of `trace` (replay.trace.model.Trace) sends or forces.

    Appended and recorded output ids are read directly; ids the replay makes up (block traces'
    tokens, stand-ins for unrecorded outputs) are drawn below the header's `vocab_size`, so
    that bounds them. None for an empty trace."""
    header = trace.header
    top = -1
    for call in trace.calls:
        if header.tokens == "ids" and len(call.append):
            top = max(top, int(np.max(call.append)))
        elif header.tokens != "ids":
            top = max(top, int(header.vocab_size) - 1)
        if call.output is not None and len(call.output):
            top = max(top, int(np.max(call.output)))
        elif call.output_len:
            top = max(top, int(header.vocab_size) - 1)
    return None if top < 0 else top


def vocab_problem(trace, vocab: int, model: str) -> str | None:
    """Why `trace` cannot be replayed against a model of `vocab` ids, or None when it fits."""
    top = trace_max_token_id(trace)
    if top is None or top < vocab:
        return None
    where = trace.path or trace.header.source or "the trace"
    return (
        f"{where} holds token id {top}, but {model} has vocab_size {vocab} (ids 0..{vocab - 1}); "
        f"replay a trace recorded with this model's tokenizer, or synthesize one with "
        f"vocab_size <= {vocab}"
    )
