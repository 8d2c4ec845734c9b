"""`SimTransport`: the reference engine in process, behind the driver's `Transport` seam.

Run the agent pool on `replay.clock.VirtualTimeLoop`: the engine sleeps simulated step durations
on the loop, so virtual time jumps and a replay of hours takes seconds. Results carry loop times.
"""

from __future__ import annotations

import asyncio

import numpy as np

from replay.errors import ErrorKind, RequestFailed
from replay.protocol import CompletionRequest, CompletionResult
from replay.sim.engine import Seq, SimEngine
from replay.sim.keying import TaskKeyer
from replay.sim.options import SimConfig
from replay.sim.runner import EngineRunner, LoopSimClock, settle
from replay.trace.tokens import output_tokens

__all__ = ["SimTransport"]


class SimTransport:
    """In-process simulator transport. Forced output ids (if sent) are what it "generates";
    otherwise it generates the trace's stand-in ids for (task, call) with `vocab_size`."""

    name = "sim"

    def __init__(
        self, config: SimConfig, vocab_size: int = 32000, debug: bool = False, stretch: bool = True
    ):
        self.config = config
        self.vocab_size = vocab_size
        self.engine = SimEngine(config, debug=debug, stretch=stretch)
        self._keyer = TaskKeyer(config.block_tokens)
        self._runner: EngineRunner | None = None

    async def start(self) -> None:
        if self._runner is None:
            self._runner = EngineRunner(self.engine, LoopSimClock())
            self._runner.start()

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.stop()
            self._runner = None

    def check_lengths(self, prompt_tokens: int, max_tokens: int) -> None:
        """RequestFailed(http_4xx) unless prompt + output fit the simulated device and model.

        Called before anything of the request's size is allocated (its output ids, its keys), so
        a tiny request asking for 10**9 tokens costs nothing but the answer."""
        if max_tokens < 0:
            raise RequestFailed(ErrorKind.HTTP_4XX, "max_tokens must be >= 0", 400)
        limit = self.engine.max_request_tokens()
        if prompt_tokens + max_tokens > limit:
            self.engine.c["rejected_requests"] += 1
            holds = (
                f"--max-model-len ({limit} tokens)"
                if limit == self.engine.cfg.max_model_len
                else f"what the simulated device holds ({limit} tokens); raise --device-kv-gib"
            )
            raise RequestFailed(
                ErrorKind.HTTP_4XX,
                f"prompt ({prompt_tokens}) + max_tokens ({max_tokens}) exceeds {holds}",
                400,
            )

    def make_seq(self, request: CompletionRequest) -> Seq:
        """Check the request and key its prompt + output; RequestFailed(http_4xx) if invalid."""
        prompt = np.asarray(request.prompt)
        n_out = int(request.max_tokens)
        if len(prompt) == 0:
            raise RequestFailed(ErrorKind.HTTP_4XX, "prompt is empty", 400)
        self.check_lengths(len(prompt), n_out)
        out = request.forced_output
        if out is None or len(out) != n_out:  # the trace's stand-ins for (task, call)
            out = output_tokens(request.task, request.call, n_out, self.vocab_size)
        keys = self._keyer.keys(request.task, prompt, out)
        seq = Seq(request.task, len(prompt), n_out, keys)
        seq.output_ids = out
        if self.config.personality == "llamacpp":
            seq.prompt_ids = prompt.astype(np.int64)
        return seq

    async def complete(self, request: CompletionRequest) -> CompletionResult:
        if self._runner is None:
            await self.start()
        assert self._runner is not None
        seq = self.make_seq(request)
        fut = asyncio.get_running_loop().create_future()
        seq.on_done = lambda s: settle(fut)
        seq.on_fail = lambda s, e: settle(
            fut, RequestFailed(ErrorKind.HTTP_5XX, f"simulator engine failed: {e!r}", 500)
        )
        self._runner.submit(seq)
        await fut
        assert seq.t_end is not None
        forced = seq.output_ids if request.forced_output is not None else None
        return CompletionResult(
            t_first_token=seq.t_first,
            t_end=seq.t_end,
            prompt_tokens=seq.prompt_len,
            completion_tokens=seq.output_len,
            cached_tokens=seq.cached_tokens,
            cached_by_source={"device": seq.device_hit_tokens, "host": seq.host_restore_tokens},
            output_ids=forced,
            extra={
                "device_hit_tokens": seq.device_hit_tokens,
                "host_restore_tokens": seq.host_restore_tokens,
            },
            # the engine emits the last token as the sequence ends; it keeps no per-token times
            t_last_token=seq.t_end if seq.output_len else None,
            stream_tokens=seq.output_len,
        )

    def engine_time(self) -> float:
        """Simulated time now (the running loop's time)."""
        return asyncio.get_running_loop().time()

    def counters(self) -> dict[str, int]:
        """Canonical counters (docs/architecture.md) plus extras, cumulative since construction."""
        return self.engine.counters()
