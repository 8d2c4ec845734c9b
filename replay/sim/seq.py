"""One request inside the simulated engine: its sizes, block keys, progress and callbacks.

`SimEngine` (replay.sim.engine) moves it through its states; the fronts (the in-process transport and
the HTTP server) create it and read the times and token counts it ends with.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["Seq"]


@dataclass(eq=False)
class Seq:
    """One request inside the engine. `keys`: block keys of the full blocks of prompt + output."""

    task: str
    prompt_len: int
    output_len: int
    keys: np.ndarray
    arrival: float = 0.0
    state: str = "new"  # waiting, loading, prefill, decode, done
    prefill_len: int = 0
    computed: int = 0
    generated: int = 0
    kv: int = 0
    held: int = 0
    anon: int = 0
    ready_at: float = 0.0
    admitted: bool = False
    write_ok: bool = True  # the admission's decision, taken at the first lookup
    device_hit_tokens: int = 0
    host_restore_tokens: int = 0
    t_first: float | None = None
    t_end: float | None = None
    on_first: Callable[[Seq], None] | None = None
    on_done: Callable[[Seq], None] | None = None
    on_fail: Callable[[Seq, BaseException], None] | None = None
    output_ids: np.ndarray | None = None  # what the request "generates" (fronts set it)
    order: int = 0
    prompt_ids: np.ndarray | None = None  # the llamacpp personality matches prompts token by token
    slot: int = -1  # llamacpp personality: the server slot serving it

    @property
    def cached_tokens(self) -> int:
        return self.device_hit_tokens + self.host_restore_tokens
