"""Build a tiny Llama model directory offline, so a real vLLM can run in CI without a model hub.

The directory holds `config.json`, `generation_config.json` and a byte-level BPE tokenizer trained
here on seeded synthetic text (`tokenizer.json` + `tokenizer_config.json`). There are no weights:
the server is started with `--load-format dummy`, which fills the tensors itself. The outputs are
meaningless, which is fine: the harness forces the recorded output ids and measures KV caching,
and cache behaviour depends only on the token ids and the model's shape.

Shape (defaults): hidden 256, 2 layers, 4 heads, 2 KV heads (head dim 64), vocab 8192, 32K
positions, bfloat16, so one token of KV is 2 (K, V) x 2 layers x 2 heads x 64 x 2 bytes = 1 KiB and
one 128-token CPU block is 128 KiB: `--kv-cache-memory-bytes` sizes the device tier in whole blocks.

`tokenizers` is only needed to build the directory (it comes with vLLM; for the main environment it
is in the `vllm` extra); importing this module does not need it.

    python -m replay.engines.tinymodel OUT_DIR      # prints OUT_DIR; reuses a complete directory
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from replay.errors import ConfigError

__all__ = ["TinyLlama", "build_tiny_model", "kv_bytes_per_token", "SPECIAL_TOKENS"]

# Ids 0..2 of the vocabulary; the tokenizer trainer puts special tokens first.
SPECIAL_TOKENS = ("<s>", "</s>", "<unk>")
_STAMP = ".replay-tinymodel.json"  # written last: a directory with it is complete and reusable


@dataclass(frozen=True)
class TinyLlama:
    """Shape of the tiny model. Defaults give 1 KiB of KV per token (see module docstring)."""

    hidden_size: int = 256
    intermediate_size: int = 512
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    vocab_size: int = 8192
    max_positions: int = 32768
    dtype: str = "bfloat16"
    tokenizer_seed: int = 0
    tokenizer_corpus_words: int = 400_000

    def __post_init__(self) -> None:
        for name in ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads"):
            if getattr(self, name) <= 0:
                raise ConfigError("tiny model", name, "must be a positive integer")
        if self.hidden_size % self.num_heads:
            raise ConfigError("tiny model", "num_heads", "must divide hidden_size")
        if self.num_heads % self.num_kv_heads:
            raise ConfigError("tiny model", "num_kv_heads", "must divide num_heads")
        # Byte-level BPE starts from 256 byte symbols plus the special tokens.
        if self.vocab_size < 512:
            raise ConfigError("tiny model", "vocab_size", "must be at least 512")
        if self.dtype not in ("bfloat16", "float16", "float32"):
            raise ConfigError("tiny model", "dtype", "must be bfloat16, float16 or float32")
        if self.max_positions < 1024:
            raise ConfigError("tiny model", "max_positions", "must be at least 1024")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


def kv_bytes_per_token(shape: TinyLlama) -> int:
    """KV cache bytes one token occupies: K and V, every layer, every KV head."""
    elem_bytes = {"bfloat16": 2, "float16": 2, "float32": 4}[shape.dtype]
    return 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * elem_bytes


def _config_json(shape: TinyLlama) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": shape.hidden_size,
        "intermediate_size": shape.intermediate_size,
        "num_hidden_layers": shape.num_layers,
        "num_attention_heads": shape.num_heads,
        "num_key_value_heads": shape.num_kv_heads,
        "head_dim": shape.head_dim,
        "vocab_size": shape.vocab_size,
        "max_position_embeddings": shape.max_positions,
        "torch_dtype": shape.dtype,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "initializer_range": 0.02,
    }


def _corpus(rng: random.Random, words: int) -> list[str]:
    """Seeded pseudo-text: lowercase words with a skewed length and letter mix, in lines.

    A skewed distribution gives BPE frequent pairs to merge, so the trainer fills the whole
    vocabulary (a uniform one would stall early and leave ids unused).
    """
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    weights = [1.0 / (i + 1) ** 0.7 for i in range(len(letters))]
    lines: list[str] = []
    line: list[str] = []
    for _ in range(words):
        n = min(12, 1 + int(rng.expovariate(0.35)))
        line.append("".join(rng.choices(letters, weights, k=n)))
        if len(line) >= 16:
            lines.append(" ".join(line))
            line = []
    if line:
        lines.append(" ".join(line))
    return lines


def _train_tokenizer(shape: TinyLlama, out: Path) -> int:
    """Train a byte-level BPE of `shape.vocab_size` ids and save it; returns the trained size."""
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ConfigError(
            "tiny model",
            "tokenizers",
            "the `tokenizers` package is needed: pip install -e '.[vllm]'",
        ) from e
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=shape.vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    rng = random.Random(shape.tokenizer_seed)
    tok.train_from_iterator(_corpus(rng, shape.tokenizer_corpus_words), trainer=trainer)
    tok.save(str(out / "tokenizer.json"))
    return tok.get_vocab_size()


def build_tiny_model(out_dir: str | os.PathLike, shape: TinyLlama | None = None) -> Path:
    """Write the model directory (reused when a complete one with the same shape is there).

    Files are written into a temporary sibling directory and renamed into place, so a killed build
    never leaves a half directory that a later run would take for complete.
    """
    shape = shape or TinyLlama()
    out = Path(out_dir)
    stamp = out / _STAMP
    if stamp.exists():
        try:
            if json.loads(stamp.read_text()) == asdict(shape):
                return out
        except (OSError, ValueError):
            pass
        raise ConfigError(str(out), None, "holds a different tiny model; remove it or pick another")
    if out.exists() and any(out.iterdir()):
        raise ConfigError(str(out), None, "exists and is not a tiny model directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tinymodel-", dir=out.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the model directory is plain data
    trained = _train_tokenizer(shape, tmp)
    if trained != shape.vocab_size:
        raise ConfigError(
            "tiny model",
            "vocab_size",
            f"the tokenizer trained only {trained} of {shape.vocab_size} ids; raise tokenizer_corpus_words",
        )
    (tmp / "config.json").write_text(json.dumps(_config_json(shape), indent=2))
    (tmp / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 0, "eos_token_id": 1}, indent=2)
    )
    tok_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": SPECIAL_TOKENS[0],
        "eos_token": SPECIAL_TOKENS[1],
        "unk_token": SPECIAL_TOKENS[2],
        "model_max_length": shape.max_positions,
        "clean_up_tokenization_spaces": False,
    }
    (tmp / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2))
    (tmp / _STAMP).write_text(json.dumps(asdict(shape), indent=2))
    if out.exists():
        out.rmdir()  # empty (checked above)
    tmp.rename(out)
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m replay.engines.tinymodel OUT_DIR", file=sys.stderr)
        return 2
    try:
        print(build_tiny_model(args[0]))
    except ConfigError as e:
        print(f"replay: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
