"""In-memory trace model: a header and calls stored as deltas; prompts expanded on demand.

A call's prompt is the task's previous context (previous prompt + previous output) cut to `keep`,
then `append`. Memory is proportional to the appended (unique) tokens; a prompt exists as an array
only while someone asks for it. See traces/FORMAT.md for the on-disk form.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from replay.trace.tokens import block_tokens, output_tokens, output_tokens_many, tail_tokens

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "TraceHeader", "Call", "Trace", "CallRef", "Step"]

FORMAT_NAME = "replay-trace"
FORMAT_VERSION = 1
# token ids are held as 32-bit integers (the prompts of a paper-scale trace are billions of ids),
# so a vocabulary may hold at most 2^31 of them: ids 0 .. 2^31 - 1
MAX_VOCAB_SIZE = 1 << 31

CallRef = tuple[str, int]  # (task id, call index)


@dataclass(frozen=True)
class TraceHeader:
    """First line of a trace file. `tokens` says whether `append` holds token ids or block hash ids."""

    tokens: Literal["ids", "blocks"] = "ids"
    vocab_size: int = 32000
    block_size: int | None = None  # tokens per hash block; required when tokens == "blocks"
    model: str | None = None
    source: str | None = None
    meta: dict = field(default_factory=dict)
    format: str = FORMAT_NAME
    version: int = FORMAT_VERSION


@dataclass(frozen=True, eq=False)
class Call:
    """One LLM request of a task, as a delta against the task's previous context.

    ids traces: `keep` counts tokens of the previous context (prompt + output) kept as the prefix,
    `append` holds the new token ids (int32). blocks traces: `keep` counts blocks of the previous
    prompt's block list, `append` holds new block hash ids (int64), and `prompt_len` gives the exact
    token length: the last block may be partial, or the blocks may stop short of `prompt_len`
    by less than a block (an unhashed tail, filled with ids unique to this call).
    """

    task: str
    index: int
    gap_s: float
    keep: int
    append: np.ndarray
    prompt_len: int
    output_len: int
    output: np.ndarray | None = None  # recorded output ids (int32), when the trace has them
    after: tuple[CallRef, ...] = ()  # calls of other tasks that must finish first (sub-agent join)
    at_s: float | None = None  # absolute arrival time for open-loop traces
    tail_gap_s: float | None = (
        None  # on a task's last call: time before its slot takes the next task
    )
    recorded: dict | None = None  # original timings: start_s, end_s, ttft_s (seconds)
    ns: str | None = None  # block namespace (blocks traces); defaults to the task id
    parent: CallRef | None = (
        None  # the call of another task that spawned this task (first call only)
    )
    line: int = 0  # line in the source file, for messages

    @property
    def ref(self) -> CallRef:
        return (self.task, self.index)


@dataclass(frozen=True, eq=False)
class Step:
    """A call together with its expanded prompt and output ids (int32)."""

    call: Call
    prompt: np.ndarray
    output: np.ndarray

    @property
    def context(self) -> np.ndarray:
        return np.concatenate([self.prompt, self.output])


class Trace:
    """A validated trace: header, tasks in trace order, each an ordered list of calls."""

    def __init__(
        self,
        header: TraceHeader,
        calls: list[Call],
        path: str | None = None,
        sha256: str | None = None,
    ):
        self.header = header
        self.path = path
        # sha256 of the bytes of `path` as read, when the reader hashed them (the parsed-trace
        # cache does): a run's provenance then need not read the file again
        self.sha256 = sha256
        self.calls = calls
        self.tasks: dict[str, list[Call]] = {}
        for c in calls:
            self.tasks.setdefault(c.task, []).append(c)
        self._by_ref = {c.ref: c for c in calls}

    def __len__(self) -> int:
        return len(self.calls)

    @property
    def task_ids(self) -> list[str]:
        return list(self.tasks)

    def call(self, ref: CallRef) -> Call:
        return self._by_ref[ref]

    @property
    def root_task_ids(self) -> list[str]:
        """Tasks a pool slot takes, in trace order: those not spawned by another task."""
        return [t for t, cs in self.tasks.items() if cs[0].parent is None]

    @property
    def prompt_tokens(self) -> int:
        return sum(c.prompt_len for c in self.calls)

    @property
    def output_tokens(self) -> int:
        return sum(c.output_len for c in self.calls)

    def output_ids(self, call: Call) -> np.ndarray:
        """Recorded output ids, or deterministic stand-ins of the recorded length."""
        if call.output is not None:
            return call.output
        return output_tokens(call.task, call.index, call.output_len, self.header.vocab_size)

    def steps(self, task: str) -> Iterator[Step]:
        """Expanded prompts of one task, in order, holding only the current context in memory.

        With token ids, a prompt that keeps its whole previous prompt is a view of one growing
        buffer per task: the previous output and the appended ids are written past the previous
        prompt's end, where no view handed out reaches, so every prompt yielded stays as it was
        and a call costs a copy of its new tokens only (a 100K-token prompt was a 400 KB copy a
        call). A call that keeps less than its previous prompt starts a new buffer. The views are
        read-only: a write through one would change the task's later prompts."""
        h = self.header
        prev_prompt = np.empty(0, np.int32)
        prev_out = np.empty(0, np.int32)
        prev_blocks = np.empty(0, np.int64)
        buf = _NO_IDS
        outs = self._outputs(self.tasks[task])
        for c in self.tasks[task]:
            if h.tokens == "ids":
                kept_out = max(0, c.keep - len(prev_prompt))
                appended = c.append.astype(np.int32, copy=False)
                if c.keep < len(prev_prompt):  # cut into the previous prompt: a view sees it
                    buf = _extend(_NO_IDS, 0, prev_prompt[: c.keep], appended)
                else:
                    buf = _extend(buf, len(prev_prompt), prev_out[:kept_out], appended)
                prompt = buf[: c.keep + len(appended)]
                prompt.flags.writeable = False  # later prompts of the task share its memory
            else:
                bs = int(h.block_size or 0)
                blocks = np.concatenate([prev_blocks[: c.keep], c.append])
                reuse = min(
                    c.keep, len(prev_prompt) // bs
                )  # full blocks whose tokens we already have
                fresh = block_tokens(c.ns or c.task, blocks[reuse:], bs, h.vocab_size)
                prompt = np.concatenate([prev_prompt[: reuse * bs], fresh])[: c.prompt_len]
                if len(prompt) < c.prompt_len:  # unhashed tail shorter than a block
                    tail = tail_tokens(
                        c.ns or c.task, c.task, c.index, c.prompt_len - len(prompt), h.vocab_size
                    )
                    prompt = np.concatenate([prompt, tail])
                prev_blocks = blocks
            out = next(outs)
            yield Step(c, prompt, out)
            prev_prompt, prev_out = prompt, out

    def _outputs(self, calls: list[Call]) -> Iterator[np.ndarray]:
        """`output_ids` of each call in order, the stand-ins made for the next calls together, up to
        `_OUTPUT_BATCH_TOKENS` ids at a time: one call's alone costs ~10 us of fixed array work."""
        i = 0
        while i < len(calls):
            batch: list[tuple[str, int, int]] = []
            j, n = i, 0
            while j < len(calls) and (j == i or n + calls[j].output_len <= _OUTPUT_BATCH_TOKENS):
                if calls[j].output is None:
                    batch.append((calls[j].task, calls[j].index, calls[j].output_len))
                    n += calls[j].output_len
                j += 1
            made = iter(output_tokens_many(batch, self.header.vocab_size))
            for c in calls[i:j]:
                yield c.output if c.output is not None else next(made)
            i = j

    def prompt(self, call: Call) -> np.ndarray:
        """The exact prompt of one call (walks its task from the start; use `steps` for many)."""
        for s in self.steps(call.task):
            if s.call.index == call.index:
                return s.prompt
        raise KeyError(call.ref)


def _room(n: int) -> int:
    """Capacity of a buffer that must hold `n` tokens: half as many again, so a task's buffer is
    copied a few times over its life (each token ~3 times in all) while holding at most 1.5x its
    context (a thousand 100K-token agents: 0.6 GB rather than 0.4 GB, or 0.8 GB at 2x)."""
    return max(n + n // 2, 1024)


_NO_IDS = np.empty(0, np.int32)  # no buffer yet: `_extend` of it allocates one
# stand-in output ids made together for a task's next calls (64 KB; ~50 calls of a coding agent)
_OUTPUT_BATCH_TOKENS = 16_384


def _extend(buf: np.ndarray, end: int, out: np.ndarray, appended: np.ndarray) -> np.ndarray:
    """buf[:end] + out + appended, in `buf` past `end` when it has room, else in a new buffer
    (the views of `buf` handed out end at or before `end`: they never see these writes). With
    `_NO_IDS` and end 0, a new buffer holding out + appended."""
    n = end + len(out) + len(appended)
    if n > len(buf):
        grown = np.empty(_room(n), np.int32)
        grown[:end] = buf[:end]
        buf = grown
    buf[end : end + len(out)] = out
    buf[end + len(out) : n] = appended
    return buf
