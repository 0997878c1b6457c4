"""The C heap of a process that packs images: memory one image frees, kept for the next.

Every image's decode and resize allocate and free the same large buffers (libjpeg's working
memory, the decoded pixels, the resized copy). glibc's ``malloc`` hands freed memory back
to the kernel: a block above its mmap threshold at once, the heap's free top once it passes
the trim threshold. The next image's buffers then fault their pages in again, each page
zeroed by the kernel: ~70 page faults an image on the benchmark photos, 0.13–0.34 ms of
kernel CPU an image in two packing processes side by side (docs/performance.md).

:func:`keep_freed_memory` fixes both thresholds where glibc's own sliding rule stops
(blocks above 32 MiB mapped, the free top trimmed past 64 MiB), so one image's buffers serve
the next. The peak resident set does not grow: what is kept was in use a moment before.
Other C libraries are left as they are.
"""

from __future__ import annotations

import ctypes
import os

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (<malloc.h>)
MMAP_THRESHOLD = 32 << 20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD  # what the sliding rule pairs with an mmap threshold

_kept = False


def keep_freed_memory() -> bool:
    """Have this process's ``malloc`` keep freed memory for reuse (see the module's
    docstring); True once set (glibc), False where the C library is another. Idempotent,
    and a forked child inherits it."""
    global _kept
    if _kept:
        return True
    try:
        version = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        return False
    if not version or not version.startswith("glibc"):
        return False
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    _kept = (mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
             and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1)
    return _kept
