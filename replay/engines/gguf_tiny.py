"""Write a tiny random-weight Llama GGUF offline, so llama.cpp's server runs in CI without a model hub.

The file holds a byte-level BPE tokenizer trained here on seeded synthetic text and random Llama
weights (hidden 256, 2 layers, 4 heads, 4 KV heads, vocab 8192 by default). Outputs are
meaningless, which is fine: the harness sends token-id prompts, pins the output length, and
measures KV caching, which depends only on token ids and the model's shape.

One token of KV is 2 (K, V) x layers x kv_heads x head_dim x 2 bytes (f16 cache) = 2 KiB with the
defaults, so `--cache-ram` in MiB holds about 512 tokens per MiB (see `kv_bytes_per_token`).

Needs `gguf` and `tokenizers` (the `llamacpp` extra); importing this module does not.

    python -m replay.engines.gguf_tiny OUT.gguf [--vocab 8192] [--seed 0]   # prints OUT.gguf
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from replay.errors import ConfigError

__all__ = ["TinyLlamaShape", "kv_bytes_per_token", "write_tiny_gguf", "ensure_tiny_gguf", "main"]

_SPECIAL = ("<|bos|>", "<|eos|>")


@dataclass(frozen=True)
class TinyLlamaShape:
    """Shape of the tiny model. Validated so a bad option fails before any file is written."""

    vocab_size: int = 8192
    hidden: int = 256
    layers: int = 2
    heads: int = 4
    kv_heads: int = 4
    ffn: int = 512
    context_tokens: int = 32768
    seed: int = 0

    def __post_init__(self) -> None:
        if self.vocab_size < 512:
            raise ConfigError(
                "tiny gguf", "vocab_size", "must be at least 512 (256 bytes + merges)"
            )
        if self.hidden <= 0 or self.heads <= 0 or self.hidden % self.heads:
            raise ConfigError("tiny gguf", "hidden", "must be a positive multiple of heads")
        if self.kv_heads <= 0 or self.heads % self.kv_heads:
            raise ConfigError("tiny gguf", "kv_heads", "must divide heads")
        if self.layers <= 0 or self.ffn <= 0 or self.context_tokens <= 0:
            raise ConfigError("tiny gguf", "layers", "layers, ffn and context_tokens must be > 0")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def name(self) -> str:
        return (
            f"tiny-llama-v{self.vocab_size}-h{self.hidden}-l{self.layers}"
            f"-kv{self.kv_heads}-s{self.seed}"
        )


def kv_bytes_per_token(shape: TinyLlamaShape, cache_type_bytes: int = 2) -> int:
    """KV bytes one token occupies in a slot (and, plus small per-entry overhead, in `--cache-ram`)."""
    return 2 * shape.layers * shape.kv_heads * shape.head_dim * cache_type_bytes


def _corpus(seed: int, n_lines: int = 4000) -> list[str]:
    """Seeded pseudo-text: syllable words with code-like punctuation, enough for ~8K merges."""
    rng = random.Random(seed)
    onsets = ["", "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w"]
    onsets += ["st", "tr", "pr", "ch", "sh", "th", "qu", "gr", "pl", "sp"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ea", "ou", "io"]
    codas = ["", "", "n", "r", "s", "t", "l", "m", "ng", "ck", "st"]
    words = []
    for _ in range(6000):
        n = rng.choice((1, 1, 2, 2, 3))
        words.append(
            "".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas) for _ in range(n))
        )
    punct = [" ", " ", " ", " ", ", ", ". ", "(", ")", " = ", "_", ".", ": ", "\n", "    ", "/"]
    lines = []
    for _ in range(n_lines):
        parts = []
        for _ in range(rng.randint(6, 24)):
            w = rng.choice(words)
            if rng.random() < 0.1:
                w = w.capitalize()
            if rng.random() < 0.05:
                w += str(rng.randint(0, 999))
            parts.append(w + rng.choice(punct))
        lines.append("".join(parts))
    return lines


def _train_tokenizer(shape: TinyLlamaShape) -> tuple[list[str], list[int], list[str]]:
    """(tokens, token types, merges) of a byte-level BPE of exactly `shape.vocab_size` tokens.

    Tokens the trainer could not fill from the corpus are padded as UNUSED, so the id range the
    traces use (0..vocab_size-1) is always valid on the server.
    """
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ConfigError(
            "tiny gguf", "tokenizers", "not installed: pip install -e '.[llamacpp]'"
        ) from e
    import gguf
    import orjson

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=shape.vocab_size,
        special_tokens=list(_SPECIAL),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(shape.seed), trainer=trainer)
    state = orjson.loads(tok.to_str())
    vocab: dict[str, int] = state["model"]["vocab"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in state["model"]["merges"]]
    tokens = [""] * shape.vocab_size
    types = [int(gguf.TokenType.UNUSED)] * shape.vocab_size
    for text, i in vocab.items():
        if i < shape.vocab_size:
            tokens[i] = text
            types[i] = int(gguf.TokenType.CONTROL if text in _SPECIAL else gguf.TokenType.NORMAL)
    for i, text in enumerate(tokens):
        if not text:
            tokens[i] = f"<|unused_{i}|>"
    return tokens, types, merges


def write_tiny_gguf(path: str | os.PathLike[str], shape: TinyLlamaShape | None = None) -> Path:
    """Write the tiny model to `path` (atomically: temp file + rename) and return the path."""
    import gguf

    shape = shape or TinyLlamaShape()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tokens, types, merges = _train_tokenizer(shape)
    rng = np.random.default_rng(shape.seed)

    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float32)

    fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        w = gguf.GGUFWriter(tmp, "llama")
        w.add_name(shape.name)
        w.add_context_length(shape.context_tokens)
        w.add_embedding_length(shape.hidden)
        w.add_block_count(shape.layers)
        w.add_feed_forward_length(shape.ffn)
        w.add_head_count(shape.heads)
        w.add_head_count_kv(shape.kv_heads)
        w.add_rope_dimension_count(shape.head_dim)
        w.add_rope_freq_base(10000.0)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_vocab_size(shape.vocab_size)
        w.add_file_type(int(gguf.LlamaFileType.ALL_F32))
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("gpt-2")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        w.add_bos_token_id(tokens.index(_SPECIAL[0]))
        w.add_eos_token_id(tokens.index(_SPECIAL[1]))
        w.add_add_bos_token(False)
        h, kv = shape.hidden, shape.kv_heads * shape.head_dim
        # numpy (rows, cols) becomes ggml ne = [cols, rows]: weights are stored as (out, in)
        w.add_tensor("token_embd.weight", mat(shape.vocab_size, h))
        w.add_tensor("output_norm.weight", np.ones(h, np.float32))
        w.add_tensor("output.weight", mat(shape.vocab_size, h))
        for b in range(shape.layers):
            w.add_tensor(f"blk.{b}.attn_norm.weight", np.ones(h, np.float32))
            w.add_tensor(f"blk.{b}.attn_q.weight", mat(h, h))
            w.add_tensor(f"blk.{b}.attn_k.weight", mat(kv, h))
            w.add_tensor(f"blk.{b}.attn_v.weight", mat(kv, h))
            w.add_tensor(f"blk.{b}.attn_output.weight", mat(h, h))
            w.add_tensor(f"blk.{b}.ffn_norm.weight", np.ones(h, np.float32))
            w.add_tensor(f"blk.{b}.ffn_gate.weight", mat(shape.ffn, h))
            w.add_tensor(f"blk.{b}.ffn_up.weight", mat(shape.ffn, h))
            w.add_tensor(f"blk.{b}.ffn_down.weight", mat(h, shape.ffn))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def ensure_tiny_gguf(
    directory: str | os.PathLike[str], shape: TinyLlamaShape | None = None
) -> Path:
    """The tiny model's file in `directory`, written first if it is not there yet (named by shape)."""
    shape = shape or TinyLlamaShape()
    path = Path(directory) / f"{shape.name}.gguf"
    if not path.is_file():
        write_tiny_gguf(path, shape)
    return path


def default_model_dir() -> Path:
    """Where `model = "tiny"` is written: $REPLAY_CACHE_DIR, else ~/.cache/replay."""
    base = os.environ.get("REPLAY_CACHE_DIR") or os.path.join(Path.home(), ".cache", "replay")
    return Path(base) / "models"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m replay.engines.gguf_tiny", description=__doc__)
    parser.add_argument("out", help="GGUF file to write")
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        path = write_tiny_gguf(args.out, TinyLlamaShape(vocab_size=args.vocab, seed=args.seed))
    except ConfigError as e:
        print(f"replay: {e}", file=sys.stderr)
        return e.exit_code
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
