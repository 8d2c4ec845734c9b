"""`RunOptions`: everything that shapes one replay, validated on construction."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from replay.driver.fine_timer import SPIN_S as TIMER_SPIN_S
from replay.errors import ConfigError

__all__ = ["RunOptions", "TIMINGS", "ON_ERROR", "task_identity_fields"]

TIMINGS = ("think", "original")
# Beyond this a scaled gap or arrival time (each at most 1e9 s) leaves any sensible clock range.
MAX_GAP_SCALE = 1e6
ON_ERROR = ("continue", "abort-task")
# a spin this long would cost more CPU than any timer precision is worth
MAX_TIMER_SPIN_S = 0.01

# engine adapter hook: (max_tokens, forced output ids or None) -> extra request fields
RequestExtras = Callable[[int, list[int] | None], dict[str, Any]]

# The key under which the EfficientAgent study's connector reads a request's task: its
# kvtier/connector.py takes `kv_transfer_params.get("efficientagent.task_id")` (one flat key with
# a dot, not a nested object) to count the distinct tasks looked up in the last 60 s, and its
# replay client (efficientagent/replay/client.py `request_body`) sends it on every call.
TASK_ID_KEY = "efficientagent.task_id"


def task_identity_fields(task: str, extras: dict[str, Any]) -> dict[str, Any]:
    """`extras` with the task's identity added to `kv_transfer_params` (keys already there stay).

    vLLM's completion request declares `kv_transfer_params` (vllm 0.33.0
    entrypoints/openai/completion/protocol.py) and hands it to the KV connector in the sampling
    params' `extra_args`; LMCache forwards only its own `lmcache.*` keys into its cache keys
    (lmcache 0.5.6 integration/vllm/utils.py), so the identity changes no cache hit."""
    params = dict(extras.get("kv_transfer_params") or {})
    params[TASK_ID_KEY] = task
    return {**extras, "kv_transfer_params": params}


def _env_on(name: str) -> bool:
    """A switch that is on unless the environment says `off` (or 0, false, no)."""
    return os.environ.get(name, "on").strip().lower() not in ("off", "0", "false", "no")


@dataclass(frozen=True)
class RunOptions:
    """How the agent pool replays a trace.

    - `pool`: task slots running at once (A). Sub-agent tasks run beside their parent, slot-free.
    - `gap_scale`: multiplies every recorded gap (think time, tail gap, open-loop arrival time).
    - `timing`: "think" waits the recorded gap after the dependency ends; "original" keeps the
      recording's start-to-start pace within a task (still never before the dependency ends).
    - `on_error`: "continue" goes on with the task's next call; "abort-task" drops its remaining calls.
    - `strict`: a prompt/completion length mismatch fails the run.
    - `max_inflight`, `max_rps`: optional caps on concurrent requests and send rate (off: None).
    - `request_timeout_s`: whole-request limit; `connect_timeout_s`: TCP connect limit.
    - `server_gone_grace_s`: how long connection refusals are retried before the run fails; also,
      past `request_timeout_s`, how long a server may answer nothing while calls time out.
    - `interrupt_grace_s`: after Ctrl-C/SIGTERM/failure, how long in-flight calls may finish.
    - `forcing`: send the recorded output ids to the engine adapter's `request_extras`.
    - `truncate_prompt_tokens`: keep only the first N tokens of every prompt (prefix sharing
      survives), for models shorter than the recorded context; None sends prompts whole.
    - `request_extras`: the engine adapter's hook; None is plain OpenAI.
    - `min_max_tokens`: a call recorded with fewer output tokens asks for this many (the
      engine adapter's `min_max_tokens`: vLLM and SGLang refuse `max_tokens` 0); 0 asks for
      every call's recorded length.
    - `efficientagent_task_id`: add `kv_transfer_params = {"efficientagent.task_id": task}` to
      every request, the task identity the EfficientAgent study's connector reads
      (`task_identity_fields`); the sweep and `replay run` turn it on for engines whose adapter
      says so (lmcache), off otherwise.
    - `drift_warn_s`: p99 send drift above which the run warns that the client shaped the result.
    - `last_byte_sync`: a long prompt's request is written but its last byte shortly before its
      deadline, the last byte at it, where the transport can (raw); off sends it whole at the
      deadline (docs/driver.md, "Last-byte sync"). On unless `REPLAY_LAST_BYTE_SYNC=off`.
    - `timer_spin_s`: in a real-time run, the loop sleeps until this long before a timer's
      deadline and polls for the rest, so the machine's wake-up latency does not make sends late
      (replay/driver/fine_timer.py); costs up to this much CPU a deadline; 0 turns it off.
    - `progress`: live progress on stderr; `progress_plain`: as plain lines even on a terminal.
    """

    pool: int
    gap_scale: float = 1.0
    timing: Literal["think", "original"] = "think"
    on_error: Literal["continue", "abort-task"] = "continue"
    strict: bool = False
    max_inflight: int | None = None
    max_rps: float | None = None
    request_timeout_s: float = 600.0
    connect_timeout_s: float = 10.0
    server_gone_grace_s: float = 30.0
    interrupt_grace_s: float = 5.0
    progress: bool = False
    progress_plain: bool = False
    forcing: bool = False
    truncate_prompt_tokens: int | None = None
    request_extras: RequestExtras | None = None
    min_max_tokens: int = 0
    drift_warn_s: float = 0.010
    efficientagent_task_id: bool = False
    last_byte_sync: bool = field(default_factory=lambda: _env_on("REPLAY_LAST_BYTE_SYNC"))
    timer_spin_s: float = TIMER_SPIN_S

    def __post_init__(self) -> None:
        def bad(field: str, why: str) -> ConfigError:
            return ConfigError("run options", field, why)

        if not isinstance(self.pool, int) or self.pool < 1:
            raise bad("pool", f"must be an integer >= 1, got {self.pool!r}")
        if not 0 <= self.gap_scale <= MAX_GAP_SCALE:  # also refuses nan and inf
            raise bad("gap_scale", f"must be in [0, {MAX_GAP_SCALE:g}], got {self.gap_scale!r}")
        if self.timing not in TIMINGS:
            raise bad("timing", f"must be one of {', '.join(TIMINGS)}, got {self.timing!r}")
        if self.on_error not in ON_ERROR:
            raise bad("on_error", f"must be one of {', '.join(ON_ERROR)}, got {self.on_error!r}")
        if self.max_inflight is not None and self.max_inflight < 1:
            raise bad("max_inflight", f"must be >= 1 (or unset), got {self.max_inflight}")
        if self.max_rps is not None and not self.max_rps > 0:
            raise bad("max_rps", f"must be > 0 (or unset), got {self.max_rps}")
        for name in ("request_timeout_s", "connect_timeout_s"):
            if not getattr(self, name) > 0:
                raise bad(name, f"must be > 0, got {getattr(self, name)!r}")
        for name in ("server_gone_grace_s", "interrupt_grace_s", "drift_warn_s"):
            if not getattr(self, name) >= 0:
                raise bad(name, f"must be >= 0, got {getattr(self, name)!r}")
        if not 0 <= self.timer_spin_s <= MAX_TIMER_SPIN_S:
            raise bad(
                "timer_spin_s", f"must be in [0, {MAX_TIMER_SPIN_S:g}] s, got {self.timer_spin_s!r}"
            )
        if not isinstance(self.min_max_tokens, int) or isinstance(self.min_max_tokens, bool):
            raise bad("min_max_tokens", f"must be an integer >= 0, got {self.min_max_tokens!r}")
        if self.min_max_tokens < 0:
            raise bad("min_max_tokens", f"must be an integer >= 0, got {self.min_max_tokens!r}")
        if self.truncate_prompt_tokens is not None and self.truncate_prompt_tokens < 1:
            raise bad("truncate_prompt_tokens", f"must be >= 1, got {self.truncate_prompt_tokens}")

    def config_dict(self) -> dict[str, Any]:
        """JSON-able view for run.json (the hook is named, not serialized)."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "request_extras"}
        hook = self.request_extras
        out["request_extras"] = None if hook is None else getattr(hook, "__qualname__", str(hook))
        return out
