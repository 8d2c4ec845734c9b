"""Exact output forcing on SGLang: a per-request custom logit processor that lets through only the
recorded output id at each step.

SGLang 0.5.23 (srt/sampling/custom_logit_processor.py) takes a per-request
`custom_logit_processor` string, `{"callable": <hex of a pickled class>}` (its `to_str` uses
dill, whose loader also reads a plain pickle), when the server runs with
`--enable-custom-logit-processor`. Its sampler (srt/layers/sampler.py,
`apply_custom_logit_processor`) instantiates the class and calls it with the batch rows that
asked for it and each request's `custom_params`, into which the scheduler adds `"__req__"`, the
request itself (srt/managers/schedule_batch.py); `req.output_ids` are the ids sampled so far.
The class is pickled by reference, so `replay` must be importable in SGLang's environment (as
for vLLM's processors; `make setup-gpu ENGINE=sglang` installs it there).

No torch or SGLang import here: the rows are indexed and assigned like any array, so the same
code runs on SGLang's tensors and in tests on numpy arrays.
"""

from __future__ import annotations

import json
import pickle
from typing import Any

__all__ = ["ForcedOutputLogitProcessor", "PARAM", "serialized_processor"]

PARAM = "forced_token_ids"  # the key in the request's custom_params


class ForcedOutputLogitProcessor:
    """Each row whose params carry `forced_token_ids`: every logit -inf except the recorded id
    at the row's position (the number of ids it has produced). Past the recording, or without
    forced ids, the row is left alone (length forcing still ends the output)."""

    def __call__(self, logits: Any, custom_param_list: list[dict[str, Any] | None] | None = None):
        for row, params in enumerate(custom_param_list or ()):
            if not params or PARAM not in params:
                continue
            req = params.get("__req__")
            if req is None:
                continue
            forced = params[PARAM]
            step = len(req.output_ids)
            if step >= len(forced):
                continue
            token = int(forced[step])
            logits[row, :] = float("-inf")
            logits[row, token] = 0.0
        return logits


def serialized_processor() -> str:
    """The request's `custom_logit_processor` value for ForcedOutputLogitProcessor, in the format
    SGLang's `CustomLogitProcessor.from_str` reads."""
    return json.dumps({"callable": pickle.dumps(ForcedOutputLogitProcessor).hex()})
