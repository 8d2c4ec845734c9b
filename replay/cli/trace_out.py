"""Where `replay trace` subcommands write: one check before the work, one write after it."""

from __future__ import annotations

import errno
from collections.abc import Iterable
from pathlib import Path

from replay.cli.out_file import check_plain_file
from replay.errors import ConfigError

__all__ = ["check_out", "write_out"]


def check_out(out: str, cmd: str, sources: Iterable[str] = ()) -> None:
    """Refuse an -o that cannot be a file, or that would replace or sit among the command's own
    inputs, before the (possibly long) work that fills it. The inputs are read whole before the
    write, so `-o` naming one of them would succeed and leave only the output; inside a source
    directory, the next import of that directory would read the output back as a source."""
    if not out.strip():
        raise ConfigError(f"trace {cmd}", "-o", "is empty; give the output file name")
    target = Path(out)
    if target.is_dir():
        raise ConfigError(f"trace {cmd}", "-o", f"{out!r} is a directory; give a file name")
    check_plain_file(out, f"trace {cmd}", "-o")
    resolved = target.resolve()
    for src in sources:
        path = Path(src)
        if path.is_dir():
            if resolved.is_relative_to(path.resolve()):
                raise ConfigError(
                    f"trace {cmd}", "-o",
                    f"{out!r} is inside the source directory {src!r}; write it elsewhere",
                )  # fmt: skip
        elif resolved == path.resolve():
            raise ConfigError(
                f"trace {cmd}", "-o",
                f"{out!r} is the source file {src!r}: writing it would replace the source; "
                "give another output file",
            )  # fmt: skip


# a full disk, a quota, an I/O error: exit 1 as main() documents, not 2 (bad input)
_MACHINE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EIO)


def write_out(trace: object, out: str, cmd: str) -> None:
    """write_trace with an unwritable place (no such directory, /proc, read-only) as one line,
    and the written bytes read back first: what the reader would refuse is a TraceError naming
    OUT's line and field, and nothing is written."""
    from replay.trace.io import write_trace

    try:
        write_trace(trace, out, verify=True)  # type: ignore[arg-type]
    except OSError as e:
        why = e.strerror or str(e)
        if e.errno in _MACHINE_ERRNOS:  # the machine's fault, not the input's: exit 1
            from replay.sweep.results import ResultsWriteError

            raise ResultsWriteError(f"trace {cmd}: -o: cannot write {out!r}: {why}") from None
        raise ConfigError(f"trace {cmd}", "-o", f"cannot write {out!r}: {why}") from None
