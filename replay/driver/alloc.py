"""Keep freed memory in the process for reuse, so big per-call buffers do not page-fault anew.

A replay allocates a few large buffers per call (the expanded prompt, its JSON body: ~1 MB at
100K tokens) and frees them a moment later. glibc returns such blocks to the kernel (mmap for big
blocks, heap trimming for the rest), so every call pays fresh page faults; measured on the
driver benchmark that is about 30% of the client's CPU per call. Raising glibc's mmap and trim
thresholds keeps the memory for reuse. Process-wide, so only replay's own entry points call it.
"""

from __future__ import annotations

import ctypes
import ctypes.util

__all__ = ["keep_freed_memory"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_applied = False


def keep_freed_memory(
    mmap_threshold_bytes: int = 64 << 20, trim_threshold_bytes: int = 256 << 20
) -> bool:
    """Tune glibc malloc (once per process); False where there is no glibc (nothing changes)."""
    global _applied
    if _applied:
        return True
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    ok = mallopt(_M_MMAP_THRESHOLD, mmap_threshold_bytes) == 1
    ok = mallopt(_M_TRIM_THRESHOLD, trim_threshold_bytes) == 1 and ok
    _applied = ok
    return ok
