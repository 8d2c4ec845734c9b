"""Markdown pieces shared by every generated page: one table helper, plain values, counts."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from replay.analysis.words import fmt_point

__all__ = ["md_table", "plain", "count", "text", "fence"]

# the characters that start markdown inline syntax: emphasis, code, links and images (`[`),
# HTML and autolinks, entities, strikethrough; `|` is md_table's to escape. An underscore inside
# a word (`max_tokens`) cannot emphasise and stays as is.
_INLINE = re.compile(r"[\\`*\[\]<>&~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """A markdown table, then a blank line. A `|` in a cell is escaped and a newline becomes a
    space, so no value can break the table."""

    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return lines + [""]


def plain(v: Any) -> str:
    """A parameter value as `fmt_point` prints it (`5`, not `5.0`)."""
    return fmt_point({"": v})[1:]


def count(n: int, noun: str) -> str:
    """`1 run`, `3 runs`."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def text(v: Any) -> str:
    """Free text from a run (a failure's reason, a log line, a loader note) shown as written:
    markdown's inline characters escaped, so `__init__` is not bold and `![x](url)` is not an
    image the page would fetch."""
    return _INLINE.sub(lambda m: "\\" + m.group(0), str(v))


def fence(body: str) -> str:
    """A code fence longer than any run of backticks in `body`, so `body` cannot end it."""
    longest = max((len(m) for m in re.findall(r"`+", body)), default=0)
    return "`" * max(3, longest + 1)
