"""Reference streams of a trace: per call, the integer keys of its prompt chunks and context blocks.

Keys come from `ChunkKeyer` (prefix-chained, dense int ids shared across tasks, so a common head
gets common keys), computed once per task in call order and incrementally: a call re-hashes only
the chunks past what it shares with its task's previous call. A stream for any call order is then
a concatenation of per-call arrays, so trying several orders costs no re-keying.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from replay.errors import ConfigError
from replay.trace.keys import ChunkKeyer
from replay.trace.model import CallRef, Trace
from replay.trace.tokens import output_tokens_many

__all__ = ["KeyedTrace", "key_trace", "Stream", "build_stream", "order_indices"]


@dataclass(frozen=True, eq=False)
class KeyedTrace:
    """A trace reduced to what the stack-distance model needs, calls in trace order.

    `host_keys[i]`: keys of the full `chunk_tokens` chunks of call i's prompt. `device_keys[i]`:
    keys of the full `block_tokens` blocks of its context (prompt + all output tokens but the last,
    the KV a finished request leaves in vLLM), or None when no device stream was asked for; the first `device_prompt_blocks[i]` of
    them are the prompt's.
    """

    refs: list[CallRef]
    prompt_tokens: np.ndarray  # int64 per call
    chunk_tokens: int
    host_keys: list[np.ndarray]
    block_tokens: int | None
    device_keys: list[np.ndarray] | None
    device_prompt_blocks: np.ndarray | None  # int64 per call

    def __len__(self) -> int:
        return len(self.refs)


def key_trace(trace: Trace, chunk_tokens: int, block_tokens: int | None = None) -> KeyedTrace:
    """Key every call's prompt chunks (and, with `block_tokens`, its context blocks)."""
    if chunk_tokens <= 0:
        raise ConfigError("model", "chunk_tokens", f"must be positive, got {chunk_tokens}")
    if block_tokens is not None and block_tokens <= 0:
        raise ConfigError("model", "block_tokens", f"must be positive, got {block_tokens}")
    n = len(trace.calls)
    keyed = KeyedTrace(
        refs=[c.ref for c in trace.calls],
        prompt_tokens=np.fromiter((c.prompt_len for c in trace.calls), np.int64, n),
        chunk_tokens=chunk_tokens,
        host_keys=[_EMPTY] * n,
        block_tokens=block_tokens,
        device_keys=[_EMPTY] * n if block_tokens else None,
        device_prompt_blocks=(
            np.fromiter((c.prompt_len // block_tokens for c in trace.calls), np.int64, n)
            if block_tokens
            else None
        ),
    )
    if trace.header.tokens == "ids":
        _key_id_trace(trace, keyed)
    else:
        _key_block_trace(trace, keyed)
    return keyed


_EMPTY = np.empty(0, np.int64)


def _outputs(trace: Trace) -> list[np.ndarray]:
    """Output ids of every call (trace order): recorded, or the trace's stand-ins made in one batch
    (`output_tokens_many`: a paper-scale trace has ~1M output tokens in ~4K calls, where the
    per-call overhead of `Trace.output_ids` would dominate)."""
    calls = trace.calls
    made = iter(
        output_tokens_many(
            [(c.task, c.index, c.output_len) for c in calls if c.output is None],
            trace.header.vocab_size,
        )
    )
    return [c.output if c.output is not None else next(made) for c in calls]


def _key_id_trace(trace: Trace, keyed: KeyedTrace) -> None:
    """Token-id traces: each task's context lives in one growing buffer, edited in place.

    A call keeps `keep` tokens of the previous context and appends; only the appended tokens (and
    the outputs) are written, and `ChunkKeyer` hashes only chunks past the shared prefix, so the
    cost follows the new tokens, not the prompt lengths.
    """
    index = {c.ref: i for i, c in enumerate(trace.calls)}
    outputs = _outputs(trace)
    chunk_keyer = ChunkKeyer(keyed.chunk_tokens)
    bt = keyed.block_tokens
    block_keyer = ChunkKeyer(bt) if bt else None
    for calls in trace.tasks.values():
        buf = np.empty(1024, np.int32)
        prev_host = prev_dev = None
        prev_prompt_len = prev_ctx_len = 0
        for c in calls:
            i = index[c.ref]
            plen = c.keep + len(c.append)
            out = outputs[i][:-1] if block_keyer is not None else outputs[i]
            need = plen + len(outputs[i])
            if need > len(buf):
                grown = np.empty(max(need, 2 * len(buf)), np.int32)
                grown[: c.keep] = buf[: c.keep]
                buf = grown
            buf[c.keep : plen] = c.append
            prev_host = chunk_keyer.keys(buf[:plen], prev_host, min(c.keep, prev_prompt_len))
            keyed.host_keys[i] = prev_host
            buf[plen : plen + len(outputs[i])] = outputs[i]
            if block_keyer is not None:
                ctx_len = plen + len(out)
                prev_dev = block_keyer.keys(buf[:ctx_len], prev_dev, min(c.keep, prev_ctx_len))
                keyed.device_keys[i] = prev_dev  # type: ignore[index]
                prev_ctx_len = ctx_len
            prev_prompt_len = plen


def _key_block_trace(trace: Trace, keyed: KeyedTrace) -> None:
    """Block-hash traces: prompts come from `Trace.steps`, which regenerates only fresh blocks."""
    index = {c.ref: i for i, c in enumerate(trace.calls)}
    chunk_keyer = ChunkKeyer(keyed.chunk_tokens)
    bt = keyed.block_tokens
    block_keyer = ChunkKeyer(bt) if bt else None
    bs = int(trace.header.block_size or 0)
    for task in trace.tasks:
        prev_host = prev_dev = None
        prev_prompt_len = 0
        for step in trace.steps(task):
            i = index[step.call.ref]
            prompt = step.prompt
            # steps keeps whole blocks of the previous prompt and regenerates the rest
            shared = min(step.call.keep, prev_prompt_len // bs) * bs if bs else 0
            prev_host = chunk_keyer.keys(prompt, prev_host, shared)
            keyed.host_keys[i] = prev_host
            if block_keyer is not None:
                out = step.output[:-1]  # the last output token is never fed back: no KV
                ctx = np.concatenate([prompt, out]) if len(out) else prompt
                prev_dev = block_keyer.keys(ctx, prev_dev, shared)
                keyed.device_keys[i] = prev_dev  # type: ignore[index]
            prev_prompt_len = len(prompt)


def order_indices(keyed: KeyedTrace, order: Sequence[CallRef]) -> np.ndarray:
    """Positions (in trace order) of the calls of `order`; unknown or repeated calls are an error."""
    index = {r: i for i, r in enumerate(keyed.refs)}
    out = np.empty(len(order), np.int64)
    seen = np.zeros(len(keyed.refs), bool)
    for j, ref in enumerate(order):
        ref = (str(ref[0]), int(ref[1]))
        i = index.get(ref)
        if i is None:
            raise ConfigError("order", "call", f"call {ref[0]}#{ref[1]} is not in the trace")
        if seen[i]:
            raise ConfigError("order", "call", f"call {ref[0]}#{ref[1]} appears twice")
        seen[i] = True
        out[j] = i
    return out


@dataclass(frozen=True, eq=False)
class Stream:
    """Keys of the calls of one order, concatenated; call j owns keys[offsets[j]:offsets[j+1]]."""

    keys: np.ndarray
    offsets: np.ndarray

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


def build_stream(per_call: list[np.ndarray], idx: np.ndarray) -> Stream:
    """The stream of the calls `idx` (positions into `per_call`), in that order."""
    parts = [per_call[i] for i in idx]
    lengths = np.fromiter((len(p) for p in parts), np.int64, len(parts))
    offsets = np.zeros(len(parts) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    keys = np.concatenate(parts) if parts else np.empty(0, np.int64)
    return Stream(keys=keys.astype(np.int64, copy=False), offsets=offsets)
