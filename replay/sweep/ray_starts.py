"""Where each run of a sweep on Ray started: a task records its node before the run starts, the
head reads that for its progress line and to name the node of a run lost with it.

The record goes into the key-value store of Ray's control service (GCS, on the head node), the
store Ray's own libraries keep their state in. A put returns once the store has it, so a node
lost after its run started is always one the head can name. An actor did this before: it cost a
worker process per sweep (0.3-0.9 CPU s to start, as much as a run of the quick sweep on two
cores) and held each node's first run until that process was up.

The store's Python functions are underscore-named in Ray (stable since Ray 1.x, used by Ray
Serve and Tune); should a Ray release move them, a sweep still runs and only stops naming nodes
(every call here is wrapped for that).
"""

from __future__ import annotations

import contextlib

__all__ = ["record_start", "Starts"]

_NAMESPACE = "replay-sweep"


def _key_prefix(token: str) -> bytes:
    return f"{token}/".encode()


def record_start(token: str, key: str, node: str) -> None:
    """On the node, before the run: run `key` (`<point>/r<k>`) of sweep `token` is on `node`."""
    with contextlib.suppress(Exception):  # progress and naming only: the run goes on
        from ray.experimental import internal_kv

        internal_kv._internal_kv_put(
            _key_prefix(token) + key.encode(), node.encode(), namespace=_NAMESPACE
        )


class Starts:
    """The head's reader of one sweep's records; each record is handed out once and deleted,
    so a run submitted again (lost with its node) is seen starting anew."""

    def __init__(self, token: str):
        self.prefix = _key_prefix(token)

    def take(self) -> list[tuple[str, str]]:
        """(run key, node) of every run that started since the last call."""
        out: list[tuple[str, str]] = []
        with contextlib.suppress(Exception):  # progress only: never fails the sweep
            from ray.experimental import internal_kv

            for raw in internal_kv._internal_kv_list(self.prefix, namespace=_NAMESPACE):
                node = internal_kv._internal_kv_get(raw, namespace=_NAMESPACE)
                internal_kv._internal_kv_del(raw, namespace=_NAMESPACE)
                if node is not None:
                    out.append((raw[len(self.prefix) :].decode(), node.decode()))
        return out

    def close(self) -> None:
        """Drop what is left (runs cancelled after they started)."""
        with contextlib.suppress(Exception):
            from ray.experimental import internal_kv

            internal_kv._internal_kv_del(self.prefix, del_by_prefix=True, namespace=_NAMESPACE)
