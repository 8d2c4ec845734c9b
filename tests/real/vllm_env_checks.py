"""Checks that must run inside the vLLM environment (real torch, real vLLM types) but need no
server: `python tests/real/vllm_env_checks.py [NAME...]` runs them (all by default) and exits 0
when they hold.

Kept as a script because the main environment has neither torch nor vLLM; the pytest side
(test_vllm_env.py) runs it with .venv-vllm's interpreter and reports its output.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path


def processor_follows_the_batch() -> None:
    """Rows added, advanced, swapped, moved and removed as the model runner does it."""
    import torch
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality

    from replay.engines.vllm_forcing import XARGS_KEY, ForcedOutputLogitsProcessor

    vocab = 50
    proc = ForcedOutputLogitsProcessor(None, torch.device("cpu"), False)
    assert proc.is_argmax_invariant() is False

    def params(ids):
        return SamplingParams(max_tokens=8, extra_args=None if ids is None else {XARGS_KEY: ids})

    out_a: list[int] = []
    out_b: list[int] = []
    out_c: list[int] = [7]  # a resumed (preempted) request: one id already generated
    proc.update_state(
        BatchUpdate(
            batch_size=3,
            removed=[],
            added=[(0, params([3, 4, 5]), [1, 2], out_a), (1, params(None), [1], out_b),
                   (2, params([9, 10, 11]), [1], out_c)],
            moved=[],
        )
    )  # fmt: skip

    def step(batch: int) -> list[int]:
        logits = torch.randn(batch, vocab)
        free = logits.clone()
        got = proc.apply(logits)
        picked = got.argmax(dim=1).tolist()
        for row in range(batch):
            if row not in proc.rows:
                assert torch.equal(got[row], free[row]), "a row without forcing was changed"
            else:
                finite = torch.isfinite(got[row]).nonzero().flatten().tolist()
                ids, output = proc.rows[row]
                if len(output) < len(ids):
                    assert finite == [picked[row]], finite
        return picked

    picked = step(3)
    assert picked[0] == 3 and picked[2] == 10, picked  # c resumes at its second id
    out_a.append(picked[0])
    out_b.append(picked[1])
    out_c.append(picked[2])
    # swap a and c (rows 0 <-> 2)
    proc.update_state(
        BatchUpdate(batch_size=3, removed=[], added=[], moved=[(0, 2, MoveDirectionality.SWAP)])
    )
    picked = step(3)
    assert picked[2] == 4 and picked[0] == 11, picked
    out_a.append(picked[2])
    out_c.append(picked[0])
    # c finishes and leaves; a moves down into row 0 (one-way)
    proc.update_state(
        BatchUpdate(
            batch_size=2, removed=[0], added=[], moved=[(2, 0, MoveDirectionality.UNIDIRECTIONAL)]
        )
    )
    assert set(proc.rows) == {0}
    picked = step(2)
    assert picked[0] == 5, picked
    out_a.append(picked[0])
    # past the end of the list the row is left alone
    free_logits = torch.randn(2, vocab)
    assert torch.equal(proc.apply(free_logits.clone()), free_logits)
    # an id wider than the logits row cannot be forced and must not crash the engine
    proc.update_state(
        BatchUpdate(batch_size=2, removed=[], added=[(1, params([vocab + 5]), [1], [])], moved=[])
    )
    wide = torch.randn(2, vocab)
    assert torch.equal(proc.apply(wide.clone()), wide)
    # the class-level check the API server runs
    for bad in ([1, "x"], [1.5], [-1], 3, [True]):
        try:
            ForcedOutputLogitsProcessor.validate_params(params(bad))
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} was accepted")
    ForcedOutputLogitsProcessor.validate_params(params([0, 1, 2]))
    ForcedOutputLogitsProcessor.validate_params(params(None))
    print("processor ok")


def tiny_model_builds_and_loads() -> None:
    """The directory loads with transformers' tokenizer and config; rebuilding is idempotent."""
    from transformers import AutoConfig, AutoTokenizer

    from replay.engines.tinymodel import TinyLlama, build_tiny_model
    from replay.errors import ConfigError

    with tempfile.TemporaryDirectory() as tmp:
        out = build_tiny_model(Path(tmp) / "m")
        tok = AutoTokenizer.from_pretrained(out)
        assert len(tok) == 8192, len(tok)
        text = "tool result: 42 files changed\n"
        assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
        # every id decodes (byte-level BPE), so forced random ids always detokenize
        tok.decode(list(range(8192)))
        cfg = AutoConfig.from_pretrained(out)
        assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_key_value_heads) == (256, 2, 2)
        assert cfg.vocab_size == 8192 and cfg.max_position_embeddings == 32768
        stamp = json.loads((out / ".replay-tinymodel.json").read_text())
        assert build_tiny_model(out) == out  # same shape: reused
        try:
            build_tiny_model(out, TinyLlama(num_layers=3))
        except ConfigError:
            pass
        else:
            raise AssertionError("a different shape was written over an existing model")
        assert json.loads((out / ".replay-tinymodel.json").read_text()) == stamp
    print("tiny model ok")


CHECKS = {f.__name__: f for f in (processor_follows_the_batch, tiny_model_builds_and_loads)}

if __name__ == "__main__":
    for name in sys.argv[1:] or CHECKS:  # one interpreter: vLLM's import is most of the cost
        CHECKS[name]()
