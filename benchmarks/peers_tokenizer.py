"""Build a tiny tokenizer as a cached Hugging Face repo, for AIPerf without hub access.

Run with AIPerf's own Python (it needs tokenizers and transformers, which replay does not):
`.venv-aiperf/bin/python benchmarks/peers_tokenizer.py HF_HOME REPO`. AIPerf 0.13 under
`HF_HUB_OFFLINE=1` resolves `--tokenizer REPO` through `snapshot_download(local_files_only=True)`
(`aiperf/common/tokenizer.py::_resolve_local_snapshot`), which accepts a repo id found in the
cache and rejects a plain directory path, hence the cache layout: `hub/models--A--B/refs/main`
holding a commit id and `snapshots/<commit>/` the files. The tokenizer only has to load and
decode the zero server's one-letter answers: AIPerf counts tokens from the usage chunk.
"""

from __future__ import annotations

import string
import sys
from pathlib import Path

_COMMIT = "0" * 40  # any 40-hex id; refs/main names it


def build(hf_home: Path, repo: str) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for ch in string.ascii_lowercase + string.digits + " .,":
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")  # one token per character
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    root = hf_home / "hub" / f"models--{repo.replace('/', '--')}"
    snapshot = root / "snapshots" / _COMMIT
    fast.save_pretrained(str(snapshot))
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(_COMMIT)
    return snapshot


if __name__ == "__main__":
    print(build(Path(sys.argv[1]), sys.argv[2]))
