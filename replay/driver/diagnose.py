"""Why a run's sends drifted: the measured cause, and the advice that follows from it.

A p99 send drift above `drift_warn_s` means the client, not the server, shaped the timings. The
remedy depends on why the event loop was late, so the decision uses what the run measured:

- `encoding`: encoding request bodies at send time took a large share of the loop: one body of
  the run's longest prompt takes half the limit or more, or all bodies together (tokens sent x
  the per-token cost measured on this machine after the run) a quarter of the run's wall time or
  more. While a body is encoded no other agent sends, whatever the transport.
- `client_cpu`: the replay process kept its core busy most of the run (process CPU time over wall
  time): too many agents for one client process.
- `transport`: neither, with a client other than `raw` (which spends the least CPU per call)
  keeping the process at least half busy. Below that the client's CPU was not what made it late:
  at 26% of a core, aiohttp drifted as much as raw did beside it on the same loaded machine.
- `machine`: the process was neither busy nor encoding long bodies, yet late: other processes on
  this machine took the CPU.

The CPU figure leaves out the time the loop spent polling before deadlines (`--timer-spin-s`):
that is waiting, done on purpose; the message names it apart, since run.json's
`client_cpu_fraction` counts both.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DriftDiagnosis", "diagnose_drift", "CPU_BUSY_FRACTION"]

CPU_BUSY_FRACTION = 0.85  # process CPU / wall above this: the client's one core was the limit
TRANSPORT_BUSY_FRACTION = 0.5  # a slower client's CPU per call matters only this busy or more
ENCODING_SHARE = 0.5  # one body's encoding at least this share of the drift limit: encoding
ENCODING_LOOP_SHARE = 0.25  # or all bodies' encoding at least this share of the wall time


@dataclass(frozen=True)
class DriftDiagnosis:
    cause: str  # encoding, client_cpu, transport, machine
    message: str  # the warning line, naming the measured cause and its remedy


def diagnose_drift(
    drift_p99_s: float,
    warn_s: float,
    *,
    client_cpu_fraction: float | None,
    encode_s: float | None,
    max_prompt_tokens: int,
    transport: str | None,
    encode_share: float | None = None,
    spin_fraction: float | None = None,
) -> DriftDiagnosis:
    """The cause of a p99 send drift above `warn_s`, from the run's measurements: `encode_s`
    to encode the longest body, `encode_share` of the wall time spent encoding all bodies (an
    upper bound: a task's unchanged prefix is encoded once), the process's CPU fraction."""
    head = (
        f"p99 send drift {drift_p99_s * 1e3:.1f} ms exceeds {warn_s * 1e3:.0f} ms: the client, "
        "not the server, shaped these timings; "
    )
    cpu = "unknown" if client_cpu_fraction is None else f"{client_cpu_fraction:.0%}"
    polling = f" (besides {spin_fraction:.0%} polling before deadlines)" if spin_fraction else ""
    one_slow = encode_s is not None and encode_s >= ENCODING_SHARE * warn_s
    many = encode_share is not None and encode_share >= ENCODING_LOOP_SHARE
    if one_slow or many:
        one = "?" if encode_s is None else f"{encode_s * 1e3:.2f}"
        share = "?" if encode_share is None else f"{encode_share:.0%}"
        return DriftDiagnosis(
            "encoding",
            head + f"cause: encoding request bodies at send time (one {max_prompt_tokens}-token "
            f"body takes {one} ms to encode here, all bodies up to {share} of the run's wall "
            "time, during which no other agent sends); fewer agents sending long prompts at "
            "once (--pool, --max-inflight) or shorter prompts (--truncate-prompt-tokens); "
            "another transport does not help",
        )
    if client_cpu_fraction is not None and client_cpu_fraction >= CPU_BUSY_FRACTION:
        return DriftDiagnosis(
            "client_cpu",
            head + f"cause: client CPU saturation (the replay process used {cpu} of its core"
            f"{polling} over the run); fewer agents (--pool) or --max-inflight, or a faster core",
        )
    busy = client_cpu_fraction is None or client_cpu_fraction >= TRANSPORT_BUSY_FRACTION
    if transport is not None and transport != "raw" and busy:
        return DriftDiagnosis(
            "transport",
            head + f"cause: the {transport} client's CPU per call (process at {cpu} of a core"
            f"{polling}, bodies quick to encode); --transport raw spends the least",
        )
    return DriftDiagnosis(
        "machine",
        head + f"cause: not this process (it used {cpu} of a core{polling}, bodies quick to "
        f"encode, transport {transport or 'unknown'}): other processes on this machine took the "
        "CPU; a less busy machine",
    )
