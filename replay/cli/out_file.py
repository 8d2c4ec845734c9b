"""An output file named on the command line is written atomically (a temporary file renamed onto
it), which replaces whatever the name is: a device (`-o /dev/null`), a FIFO or a symbolic link
would become a plain file. Such a name is refused before any work."""

from __future__ import annotations

import stat
from pathlib import Path

from replay.errors import ConfigError

__all__ = ["check_plain_file"]


def check_plain_file(out: str | Path, where: str, flag: str) -> None:
    """Refuse `out` when it exists and is not a regular file, or is a symbolic link."""
    path = Path(out)
    try:
        mode = path.lstat().st_mode
    except OSError:
        return  # nothing there yet (or unreachable: the write says why)
    if stat.S_ISLNK(mode):
        raise ConfigError(
            where, flag,
            f"{str(out)!r} is a symbolic link: the write would replace the link with a file; "
            f"give the path it points to ({str(path.resolve())!r}) or another name",
        )  # fmt: skip
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):  # directories: each caller's words
        raise ConfigError(
            where, flag,
            f"{str(out)!r} is not a regular file (a device, FIFO or socket): the write would "
            "replace it with a file; give a file name",
        )  # fmt: skip


def check_outside(out: str | Path, inputs: list[str | Path], where: str, flag: str) -> None:
    """Refuse an `out` inside one of the `inputs` (results it reads): `compare --csv
    A/r0/run.json` replaced the run it compared, and the report then found it unreadable."""
    target = Path(out).resolve()
    for src in inputs:
        folder = Path(src).resolve()
        if target == folder or folder in target.parents:
            raise ConfigError(
                where, flag,
                f"{str(out)!r} is inside {str(src)!r}, which this command reads: writing it "
                "would replace results; give a file elsewhere",
            )  # fmt: skip
