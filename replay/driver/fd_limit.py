"""The process's open-file limit against the connections a run keeps open.

Each keep-alive connection is a file descriptor. Linux starts processes with a soft limit of
1,024 by default, under a hard limit that is often far higher; a pool of a thousand agents
(or an open-loop trace, up to 4,096 connections) then loses the calls past the limit to
"Too many open files" as they connect, mid-run. The soft limit is raised here, before the run,
as far as the hard limit allows.
"""

from __future__ import annotations

import resource

__all__ = ["RESERVE_FDS", "raise_open_files"]

# beside the connections: the trace, the output files, the event loop, the metrics scrapes
RESERVE_FDS = 128


def raise_open_files(connections: int) -> str | None:
    """Raise the soft RLIMIT_NOFILE to hold `connections` sockets plus `RESERVE_FDS` (never
    lowering it, never past the hard limit). Returns a warning when even the hard limit is too
    low for them, else None."""
    need = connections + RESERVE_FDS
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return None
    target = need if hard == resource.RLIM_INFINITY else min(need, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        target = soft
    if target >= need:
        return None
    return (
        f"the open-file limit is {target} (hard limit {hard}) and this run may keep "
        f"{connections} connections open: calls past the limit fail to connect (Too many open "
        f"files); raise the hard limit (ulimit -Hn {need}) or lower --pool / --max-inflight"
    )
