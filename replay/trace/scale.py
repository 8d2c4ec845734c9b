"""Structure-preserving trace scaling: every K-token block becomes one token, reuse kept exact.

A real agent trace has 100K-token contexts that a tiny CPU model (or a single small GPU) cannot
prefill in useful time, and cutting prompts to a fixed length destroys the prefix reuse that a KV
cache study measures. `scale_trace` instead maps each K-token block of a context to one token
chosen by the block's whole prefix (prefix-chained, as vLLM's block hashes are), so:

- two scaled prompts share exactly floor(L / K) tokens when the originals share L (a shared
  aligned prefix of m tokens becomes one of m / K); this holds between any two calls of the
  trace, across tasks, sub-agents and namespaces, because every block is a node of one global
  prefix trie and sibling nodes always get distinct tokens (no hash collision can merge them);
- a prompt of p tokens becomes floor(p / K) tokens, a context of p + o tokens floor((p + o) / K),
  so an output becomes about o / K tokens (at least 1 when the original had any);
- tasks, calls, their order, the sub-agent DAG (`parent`, `after`) are unchanged, and every time
  (`gap_s`, `at_s`, `tail_gap_s`) is multiplied by `time_factor`.

Token-id and block-hash traces scale alike (a block-hash trace is expanded to its defined token
ids first); the result is always a token-id trace with explicit outputs, ready to replay.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from replay.errors import ConfigError
from replay.trace.keys import ChunkKeyer
from replay.trace.model import Call, Trace, TraceHeader
from replay.trace.schedule import MAX_AT_S, MAX_SPAN_S
from replay.trace.stats import common_prefix_len
from replay.trace.tokens import output_tokens, splitmix64

__all__ = ["scale_trace", "parse_fraction"]

_ROOT = -1  # parent id of a context's first block in the trie


def parse_fraction(text: str) -> int:
    """K of a `--tokens 1/K` value; a bare `1` (no scaling) is allowed too."""
    s = text.strip().replace(" ", "")
    num, sep, den = s.partition("/")
    if s == "1":
        return 1
    if sep != "/" or num != "1" or not den.isdigit() or int(den) < 1:
        raise ConfigError(
            "--tokens", None, f"expected 1/K with K a whole number >= 1, got {text!r}"
        )
    return int(den)


class _BlockTokens:
    """Token of each trie node (a K-token block and everything before it), distinct among siblings.

    The preferred token is a hash of the node id (ids are dense, in order of first appearance, so
    the result is deterministic); a clash with a sibling probes on to the next free id. A node's
    first child is kept in an array and further children in sets: most nodes have one child,
    and a new chain's nodes after its first have none yet, so they are assigned in one step.
    """

    def __init__(self, vocab_size: int):
        self.vocab = vocab_size
        self.token = np.empty(1024, np.int32)
        self._first = np.full(1024, -1, np.int32)  # token of a node's first child
        self._more: dict[int, set[int]] = {_ROOT: set()}  # all children's tokens, when > 1
        self.n = 0

    def pick(self, parent: int, preferred: int) -> int:
        """A token no sibling (child of `parent`) has: `preferred`, or the next free one."""
        used = self._more.get(parent)
        if used is None:
            first = int(self._first[parent])
            if first < 0:
                self._first[parent] = preferred
                return preferred
            used = self._more[parent] = {first}
        if len(used) >= self.vocab:
            raise ConfigError(
                "scale", "vocab_size", "a block has more distinct successors than ids"
            )
        t = preferred
        while t in used:
            t = (t + 1) % self.vocab
        used.add(t)
        return t

    def add(self, keys: np.ndarray) -> None:
        """Give tokens to the nodes of `keys` (one context's chain) not seen before."""
        fresh = np.flatnonzero(keys >= self.n)  # new nodes of a chain are its last ones
        if not len(fresh):
            return
        first = int(fresh[0])
        new = keys[first:]
        assert np.array_equal(new, np.arange(self.n, self.n + len(new))), "dense, in order"
        while self.n + len(new) > len(self.token):
            self.token = np.concatenate([self.token, np.empty_like(self.token)])
            self._first = np.concatenate([self._first, np.full_like(self._first, -1)])
        want = (splitmix64(new.astype(np.uint64)) % np.uint64(self.vocab)).astype(np.int32)
        parent = int(keys[first - 1]) if first else _ROOT
        want[0] = self.pick(parent, int(want[0]))
        self.token[new] = want
        self._first[new[:-1]] = want[1:]  # each new node's only child so far
        self.n += len(new)


def _scaled_times(c: Call, f: float) -> dict:
    return {
        "gap_s": c.gap_s * f,
        "at_s": None if c.at_s is None else c.at_s * f,
        "tail_gap_s": None if c.tail_gap_s is None else c.tail_gap_s * f,
    }


def _check_scaled_times(trace: Trace, time_factor: float) -> None:
    """Refuse a --time that takes a gap or an arrival past the trace format's bounds (the
    reader's MAX_SPAN_S and MAX_AT_S): the scaled trace was written, then every reader refused it."""
    for c in trace.calls:
        for key, value, most in (
            ("gap_s", c.gap_s, MAX_SPAN_S),
            ("tail_gap_s", c.tail_gap_s, MAX_SPAN_S),
            ("at_s", c.at_s, MAX_AT_S),
        ):
            if value is not None and value * time_factor > most:
                raise ConfigError(
                    "scale", "time",
                    f"x{time_factor:g} makes {c.task} call {c.index}'s {key} "
                    f"{value * time_factor:.3g} s, past the trace format's {most:.0e} s",
                )  # fmt: skip


def scale_trace(trace: Trace, divisor: int, time_factor: float = 1.0) -> Trace:
    """The trace with token lengths divided by `divisor` (K) and times multiplied by `time_factor`.

    See the module docstring for what is kept exactly. Recorded timings of the original run
    (`recorded`) are dropped: they describe work of the original size.
    """
    if divisor < 1:
        raise ConfigError("scale", "tokens", f"K must be >= 1, got {divisor}")
    if not time_factor >= 0 or time_factor == float("inf"):
        raise ConfigError("scale", "time", f"must be a finite number >= 0, got {time_factor}")
    if divisor > 2**63 - 1:  # the header records it as a JSON integer
        raise ConfigError("scale", "tokens", f"K must be < 2**63, got {divisor}")
    _check_scaled_times(trace, time_factor)
    h = trace.header
    keyer = ChunkKeyer(divisor)
    nodes = _BlockTokens(h.vocab_size)
    pads = 0
    new_calls: dict[tuple[str, int], Call] = {}
    for task in trace.tasks:
        prev_ctx = np.empty(0, np.int32)
        prev_keys = np.empty(0, np.int64)
        prev_scaled = np.empty(0, np.int32)
        for step in trace.steps(task):
            c = step.call
            ctx = step.context
            same = common_prefix_len(ctx, prev_ctx)
            keys = keyer.keys(ctx, reuse_keys=prev_keys, reuse_tokens=same)
            nodes.add(keys)
            image = nodes.token[keys]
            n_prompt = len(step.prompt) // divisor
            prompt = image[:n_prompt]
            if n_prompt == 0 and len(step.prompt):
                # shorter than one block: one token no other prompt starts with keeps the
                # invariant (such a prompt shares floor(L / K) = 0 tokens with every other)
                pads += 1
                prompt = np.array([nodes.pick(_ROOT, pads % h.vocab_size)], np.int32)
            output = image[n_prompt:]
            if not len(output) and c.output_len:
                output = output_tokens(c.task, c.index, 1, h.vocab_size)
            keep = common_prefix_len(prompt, prev_scaled)
            new_calls[c.ref] = replace(
                c,
                keep=keep,
                append=np.ascontiguousarray(prompt[keep:], np.int32),
                prompt_len=len(prompt),
                output_len=len(output),
                output=np.ascontiguousarray(output, np.int32),
                ns=None,
                recorded=None,
                **_scaled_times(c, time_factor),
            )
            prev_ctx, prev_keys = ctx, keys
            prev_scaled = np.concatenate([prompt, output])
    meta = dict(h.meta)
    before = meta.get("scaled", {})
    meta["scaled"] = {
        "tokens_divisor": divisor * int(before.get("tokens_divisor", 1)),
        "time_factor": time_factor * float(before.get("time_factor", 1.0)),
    }
    if h.tokens == "blocks":
        meta["scaled"]["from_block_size"] = h.block_size
    elif "from_block_size" in before:  # scaling a scaled trace keeps where it came from
        meta["scaled"]["from_block_size"] = before["from_block_size"]
    header = TraceHeader(
        tokens="ids", vocab_size=h.vocab_size, model=h.model, source=h.source, meta=meta
    )
    return Trace(header, [new_calls[c.ref] for c in trace.calls])
