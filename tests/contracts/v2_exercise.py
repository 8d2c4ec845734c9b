"""Run the V2 forcing processor against vLLM's real V2 interface module, without vLLM installed.

Usage: python -m tests.contracts.v2_exercise VLLM_SOURCE_ROOT   (prints one JSON line)

vLLM 0.33's `.../gpu/sample/logits_processor/interface.py` is import-light by design (its torch
and worker imports sit under TYPE_CHECKING), but importing it through the package would run
`vllm/__init__.py` and pull in torch and the engine. So the parent packages are registered as
empty modules whose `__path__` points into the unpacked wheel, and only the interface file itself
runs. The processor is then imported the way the server imports it, built, fed requests, and
applied to logits: torch CPU tensors when torch is importable here, numpy arrays otherwise (the
processor indexes with Python lists, which both accept). Runs in its own process so the stub
packages never leak into the test session.
"""

from __future__ import annotations

import importlib
import json
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import numpy as np

PACKAGE = "vllm.v1.worker.gpu.sample.logits_processor"


def load_interface(root: Path) -> types.ModuleType:
    parts = PACKAGE.split(".")
    for i in range(1, len(parts) + 1):
        name = ".".join(parts[:i])
        module = types.ModuleType(name)
        module.__path__ = [str(root.joinpath(*parts[:i]))]
        sys.modules[name] = module
    return importlib.import_module(PACKAGE + ".interface")


def main(root: Path) -> dict:
    interface = load_interface(root)
    from replay.engines import vllm_forcing_v2 as v2

    try:
        import torch

        def tensor(rows: int, vocab: int):
            return torch.randn(rows, vocab, dtype=torch.float32)

        backend = "torch"
    except ImportError:

        def tensor(rows: int, vocab: int):
            return np.random.default_rng(0).standard_normal((rows, vocab)).astype(np.float32)

        backend = "numpy"

    cls = v2.ForcedOutputLogitsProcessorV2
    out: dict = {
        "backend": backend,
        "available": v2.v2_interface_available(),
        "subclass": issubclass(cls, interface.LogitsProcessor),
        "abstract_left": sorted(getattr(cls, "__abstractmethods__", ())),
    }
    vocab = 50
    prompt_len = np.zeros(8, dtype=np.int32)
    prompt_len[[2, 5, 6]] = [10, 4, 7]
    req_states = SimpleNamespace(prompt_len=SimpleNamespace(np=prompt_len))
    proc = cls(SimpleNamespace(speculative_config=None), req_states)
    out["add"] = [
        proc.add_request(2, SimpleNamespace(extra_args={"forced_token_ids": [7, 8, 9]})),
        proc.add_request(5, SimpleNamespace(extra_args=None)),
        proc.add_request(6, SimpleNamespace(extra_args={"forced_token_ids": [60, 3]})),
    ]
    # Batch: slot 2 at its second output (10 prompt + 1 output visible), slot 5 unforced, slot 6
    # at its first output but id 60 lies outside the 50-wide row: left to the model.
    ctx = interface.LogitsContext(
        expanded_idx_mapping=None,
        idx_mapping=None,
        idx_mapping_np=np.array([2, 5, 6], dtype=np.int32),
        expanded_local_pos=None,
        input_ids=None,
        pos=None,
        seq_lens_upper_bound_np=np.array([11, 9, 7], dtype=np.int32),
    )
    logits = tensor(3, vocab)
    before = [float(x) for x in logits[1]]
    result = proc.apply(logits, ctx)
    row0 = [float(x) for x in result[0]]
    out["row0_finite"] = [i for i, x in enumerate(row0) if x != float("-inf")]
    out["row0_value"] = row0[8]
    out["row1_unchanged"] = [float(x) for x in result[1]] == before
    out["row2_all_finite"] = all(float(x) != float("-inf") for x in result[2])
    # The slot is recycled for a request without forcing: nothing of the old ids may remain.
    out["recycled"] = proc.add_request(2, SimpleNamespace(extra_args={}))
    out["targets_after_recycle"] = proc.targets(ctx, vocab)
    try:
        cls.validate_params(SimpleNamespace(extra_args={"forced_token_ids": [1, -2]}))
        out["validate"] = "accepted"
    except ValueError as e:
        out["validate"] = str(e)
    try:
        cls(SimpleNamespace(speculative_config=object()), req_states)
        out["speculative"] = "accepted"
    except ValueError as e:
        out["speculative"] = str(e)
    return out


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
