"""Choosing and building an HTTP transport: the registry, the default, the connection limit."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping

from replay.driver.fd_limit import raise_open_files
from replay.driver.http_common import HttpOptions
from replay.driver.options import RunOptions
from replay.errors import ConfigError
from replay.protocol import Transport
from replay.trace.model import Trace

__all__ = ["TRANSPORTS", "DEFAULT_TRANSPORT", "connection_limit", "http_transport_factory"]


class _Transports(Mapping[str, type]):
    """name -> transport class, each module imported when its class is first asked for: a run
    over the default (raw) transport does not pay for importing aiohttp and httpx (~0.2 s of
    CPU, a seventh of a whole `replay run` of 256 100K-token calls)."""

    NAMES = ("aiohttp", "httpx", "raw")

    def __getitem__(self, name: str) -> type:
        if name == "aiohttp":
            from replay.driver.http_aiohttp import AiohttpTransport

            return AiohttpTransport
        if name == "httpx":
            from replay.driver.http_httpx import HttpxTransport

            return HttpxTransport
        if name == "raw":
            from replay.driver.http_raw import RawTransport

            return RawTransport
        raise KeyError(name)

    def __contains__(self, name: object) -> bool:  # without importing the class
        return name in self.NAMES

    def __iter__(self) -> Iterator[str]:
        return iter(self.NAMES)

    def __len__(self) -> int:
        return len(self.NAMES)


TRANSPORTS: Mapping[str, type] = _Transports()
# raw: the least client CPU per call (100K-token prompts: ~30% less than aiohttp, ratio to the
# baseline past 20) and send drift p99 well under 5 ms at 1,024 agents (numbers: docs/driver.md)
DEFAULT_TRANSPORT = "raw"

_OPEN_LOOP_LIMIT = 4096
_PREWARM_MAX = 1024


def connection_limit(trace: Trace, options: RunOptions) -> int:
    """Keep-alive connections a run needs: one per request that can be in flight at once.

    Closed loop: the pool plus sub-agents running beside their parents (at most 4x the pool);
    open loop: as many as arrive at once (capped); `max_inflight` bounds both.
    """
    if options.max_inflight is not None:
        return options.max_inflight
    if any(c.at_s is not None for c in trace.calls[:1]):
        return _OPEN_LOOP_LIMIT
    subagents = len(trace.tasks) - len(trace.root_task_ids)
    return max(1, min(options.pool + subagents, 4 * options.pool))


def http_transport_factory(
    url: str,
    trace: Trace,
    options: RunOptions,
    *,
    transport: str = DEFAULT_TRANSPORT,
    model: str | None = None,
) -> Callable[[], Transport]:
    """A zero-argument factory for `run_replay`, validated now (bad URL or name -> ConfigError)."""
    if transport not in TRANSPORTS:
        valid = ", ".join(TRANSPORTS)
        raise ConfigError("run", "--transport", f"unknown transport {transport!r}; valid: {valid}")
    limit = connection_limit(trace, options)
    short = raise_open_files(limit)
    if short is not None:
        print(f"replay: warning: {short}", file=sys.stderr)
    try:
        http = HttpOptions(
            url,
            model=model,
            limit=limit,
            prewarm_connections=min(limit, options.pool, _PREWARM_MAX),
            request_timeout_s=options.request_timeout_s,
            connect_timeout_s=options.connect_timeout_s,
        )
    except ValueError as e:
        raise ConfigError("run", "--url", str(e)) from None
    cls = TRANSPORTS[transport]
    return lambda: cls(http)
