"""The actor a sweep on Ray keeps on the head's node: tasks tell it where they started, the head
reads that for its progress line and to name the node of a run lost with it.

Kept apart and free of imports, so the actor's process starts without importing the harness.
"""

from __future__ import annotations

__all__ = ["Tracker"]


class Tracker:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def started(self, key: str, node: str) -> None:
        self.seen.append((key, node))

    def take(self) -> list[tuple[str, str]]:
        seen, self.seen = self.seen, []
        return seen
