"""Exact output forcing for vLLM's Model Runner V2 (the CUDA default from vLLM 0.33).

Same job as `replay.engines.vllm_forcing` (the V1 processor, still used by the CPU runner and older
releases): at each decode step leave only the recorded id finite in the request's logits row. The
V2 runner refuses V1 processors at start-up (`vllm/v1/worker/gpu/sample/logits_processor/loader.py`
checks `issubclass(cls, LogitsProcessor)` against the V2 base class), so it needs its own class.

Interface, as vLLM 0.33.0 defines it in `vllm/v1/worker/gpu/sample/logits_processor/interface.py`:
`__init__(vllm_config, req_states)` with `req_states` a `LogitsProcRequestState` (host view of
each slot's prompt length in `prompt_len.np`), `validate_params(sampling_params)` (class method,
run at admission: a ValueError fails that request), `add_request(req_idx, sampling_params) -> bool`
(a recycled slot must be fully reinitialised there), and `apply(logits, ctx)` once per step for the
whole batch, with `ctx.idx_mapping_np` (batch position -> slot) and `ctx.seq_lens_upper_bound_np`
(tokens visible to the token being sampled; exact without speculative decoding).

Position of the id to force: tokens visible minus the user prompt's length. That counts output
already committed, including output re-fed after a preemption, so a resumed request continues at
the right id; a chunk of prefill that is not the last one gives a negative position and is left
alone (its sample is discarded). Speculative decoding gives several logits rows per request and
an inexact length, so it is refused at construction rather than forced wrongly.

The interface module is import-light (no torch or GPU at import), so this module imports wherever
vLLM's package tree is present; without it the class is a plain one that refuses construction.
`apply` indexes with Python lists, which torch tensors (and numpy arrays) both accept.
"""

from __future__ import annotations

from typing import Any

from replay.engines.vllm_forcing import forced_ids_from_extra_args

__all__ = ["PROCESSOR_V2_FQCN", "ForcedOutputLogitsProcessorV2", "v2_interface_available"]

PROCESSOR_V2_FQCN = "replay.engines.vllm_forcing_v2:ForcedOutputLogitsProcessorV2"

try:  # vLLM is in the server's environment only, not in the main one.
    from vllm.v1.worker.gpu.sample.logits_processor.interface import LogitsProcessor as _Base

    _V2 = True
except ImportError:
    _Base = object  # type: ignore[assignment,misc]
    _V2 = False


def v2_interface_available() -> bool:
    """Whether vLLM's V2 logits-processor interface imports in this interpreter."""
    return _V2


class ForcedOutputLogitsProcessorV2(_Base):  # type: ignore[misc,valid-type]
    """Forces each request's recorded output ids, one per decode step (vLLM V2 logits processor).

    State: {slot: forced ids}; `add_request` overwrites or clears the slot, so a recycled slot
    never forces its previous occupant's ids. An id outside the logits row (wider than the
    model's vocabulary) cannot be forced: that step is left to the model.
    """

    @classmethod
    def validate_params(cls, sampling_params: Any) -> None:
        forced_ids_from_extra_args(getattr(sampling_params, "extra_args", None))

    def __init__(self, vllm_config: Any, req_states: Any) -> None:
        if not _V2:
            raise RuntimeError("ForcedOutputLogitsProcessorV2 needs vLLM; run it inside the server")
        if getattr(vllm_config, "speculative_config", None) is not None:
            raise ValueError(
                "forced outputs cannot be combined with speculative decoding: "
                "drop the speculative config or set forcing = false"
            )
        self.prompt_len_np = req_states.prompt_len.np
        self.forced: dict[int, list[int]] = {}

    def add_request(self, req_idx: int, sampling_params: Any) -> bool:
        try:
            ids = forced_ids_from_extra_args(getattr(sampling_params, "extra_args", None))
        except ValueError:
            ids = None  # validate_params already refused it at admission
        if ids:
            self.forced[req_idx] = ids
            return True
        self.forced.pop(req_idx, None)
        return False

    def targets(self, ctx: Any, vocab: int) -> tuple[list[int], list[int]]:
        """(logits rows, ids) to force this step; pure over host arrays, so testable alone."""
        rows: list[int] = []
        cols: list[int] = []
        seq_lens = ctx.seq_lens_upper_bound_np
        for row, slot in enumerate(ctx.idx_mapping_np.tolist()):
            ids = self.forced.get(slot)
            if ids is None:
                continue
            pos = int(seq_lens[row]) - int(self.prompt_len_np[slot])
            if 0 <= pos < len(ids) and ids[pos] < vocab:
                rows.append(row)
                cols.append(ids[pos])
        return rows, cols

    def apply(self, logits: Any, ctx: Any) -> Any:
        if not self.forced:
            return logits
        rows, cols = self.targets(ctx, int(logits.shape[1]))
        if rows:
            # Write the forced entry rather than keep the model's value: an earlier stage (bias,
            # min tokens masking EOS) may have set it to -inf, and a row needs one finite entry.
            logits[rows] = float("-inf")
            logits[rows, cols] = 0.0
        return logits
