"""Exact output forcing for vLLM: a V1 logits processor that makes the engine emit recorded ids.

A replay must do the recorded token work, output included: same count, and where the engine allows,
the same ids, so KV blocks written during decode hash like the original run's. The driver passes a
call's recorded output ids per request as `vllm_xargs = {"forced_token_ids": [...]}`; vLLM copies
them into `SamplingParams.extra_args`. At decode step k this processor leaves only id k of that list
finite in the request's logits row, so greedy and random sampling alike pick it. Requests without
the key are untouched; past the end of the list the model's own logits rule again.

Load it in the server (API server and engine core both import it):

    --logits-processors replay.engines.vllm_forcing:ForcedOutputLogitsProcessor

Interface, as in vLLM 0.32 (`vllm.v1.sample.logits_processor`): `__init__(vllm_config, device,
is_pin_memory)`, `validate_params(sampling_params)` (class method, run in the API server: a
ValueError becomes HTTP 400), `is_argmax_invariant()`, `update_state(batch_update)` fed through
`process_dict_updates` with the request's `params.extra_args`, `apply(logits)`. vLLM 0.33.0 keeps
these names (`interface.py` holds the base class, `builtin.py` holds `process_dict_updates`), and
keeps each request's output ids current whenever any custom processor is loaded
(`vllm/v1/worker/gpu_model_runner.py`: `logitsprocs_need_output_token_ids=bool(custom_logitsprocs)`),
which forcing by position needs. See docs/vllm-cpu.md.

vLLM is optional here: without it this module still imports (for docs, tests and the main
environment, where `XARGS_KEY` and the validation live), and `ForcedOutputLogitsProcessor` is then a
plain class that refuses to be constructed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "XARGS_KEY",
    "PROCESSOR_FQCN",
    "ForcedOutputLogitsProcessor",
    "forced_ids_from_extra_args",
    "vllm_available",
]

XARGS_KEY = "forced_token_ids"
PROCESSOR_FQCN = "replay.engines.vllm_forcing:ForcedOutputLogitsProcessor"

try:  # vLLM is in the server's environment only (.venv-vllm), not in the main one.
    import torch
    from vllm.v1.sample.logits_processor import LogitsProcessor as _Base

    try:
        from vllm.v1.sample.logits_processor import process_dict_updates as _process_dict_updates
    except ImportError:  # 0.32 exports it from the builtin module only
        from vllm.v1.sample.logits_processor.builtin import (
            process_dict_updates as _process_dict_updates,
        )
    _VLLM = True
except ImportError:
    _Base = object  # type: ignore[assignment,misc]
    _VLLM = False


def vllm_available() -> bool:
    """Whether vLLM (and so the real processor) can be used in this interpreter."""
    return _VLLM


def forced_ids_from_extra_args(extra_args: dict[str, Any] | None) -> list[int] | None:
    """The ids to force from a request's `extra_args`, None when it asks for none.

    Raises ValueError naming the field when the value is not a list of non-negative ints; that is
    what vLLM turns into a 400 response. Pure: usable and testable without vLLM.
    """
    if not extra_args or XARGS_KEY not in extra_args:
        return None
    value = extra_args[XARGS_KEY]
    if not isinstance(value, list | tuple):
        raise ValueError(
            f"vllm_xargs.{XARGS_KEY} must be a list of token ids, got {type(value).__name__}"
        )
    ids: list[int] = []
    for i, v in enumerate(value):
        # bool is an int subclass; a float like 3.0 is a client bug worth reporting, not rounding.
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(
                f"vllm_xargs.{XARGS_KEY}[{i}] must be a non-negative integer token id, got {v!r}"
            )
        ids.append(v)
    return ids


class ForcedOutputLogitsProcessor(_Base):  # type: ignore[misc,valid-type]
    """Forces each request's recorded output ids, one per decode step (vLLM V1 logits processor).

    State per batch row: (forced ids, live reference to the request's output id list). The number of
    ids generated so far is the position to force; vLLM keeps that list current and carries it
    across preemption, so a resumed request continues at the right id. An id outside the logits row
    (wider than the model's vocabulary) cannot be forced: that step is left to the model, and the
    driver's exact-match rate shows it.
    """

    @classmethod
    def validate_params(cls, sampling_params: Any) -> None:
        forced_ids_from_extra_args(getattr(sampling_params, "extra_args", None))

    def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool) -> None:
        if not _VLLM:
            raise RuntimeError("ForcedOutputLogitsProcessor needs vLLM; run it inside the server")
        self.device = device
        self.rows: dict[int, tuple[list[int], list[int]]] = {}

    def is_argmax_invariant(self) -> bool:
        return False  # it decides the argmax

    @staticmethod
    def _new_row(
        params: Any, prompt_ids: Sequence[int] | None, output_ids: list[int]
    ) -> tuple[list[int], list[int]] | None:
        try:
            ids = forced_ids_from_extra_args(getattr(params, "extra_args", None))
        except ValueError:
            return None  # validate_params already refused it at the API server
        if not ids:
            return None
        return (ids, output_ids)

    def update_state(self, batch_update: Any) -> None:
        _process_dict_updates(self.rows, batch_update, self._new_row)

    def apply(self, logits: Any) -> Any:
        if not self.rows:
            return logits
        vocab = logits.shape[1]
        rows: list[int] = []
        cols: list[int] = []
        for row, (ids, output_ids) in self.rows.items():
            pos = len(output_ids)
            if pos < len(ids) and ids[pos] < vocab:
                rows.append(row)
                cols.append(ids[pos])
        if not rows:
            return logits
        r = torch.tensor(rows, dtype=torch.long, device=logits.device)
        c = torch.tensor(cols, dtype=torch.long, device=logits.device)
        # Write the forced entry rather than keep the model's value: an earlier processor (min
        # tokens masking EOS, logit bias) may have set it to -inf, and the row must keep one
        # finite entry or sampling breaks.
        logits[r] = float("-inf")
        logits[r, c] = 0.0
        return logits
