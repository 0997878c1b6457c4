"""Stand-ins for a decoder that a crafted image crashes or stalls: ``imaging.process``,
except on bytes that start with a marker. Module-level, so a spawned child can import them."""

from __future__ import annotations

import os
import signal
import time

from recforge import imaging

SEGFAULT = b"CRASH-SEGV"  # the process dies of SIGSEGV, as in a C decoder's bad read
ABORT = b"CRASH-ABRT"  # an abort() inside a library
STALL = b"CRASH-HANG"  # a decode that never returns


def _crash_on_marks(data: bytes) -> None:
    if data.startswith(SEGFAULT):
        os.kill(os.getpid(), signal.SIGSEGV)
    if data.startswith(ABORT):
        os.abort()
    if data.startswith(STALL):
        time.sleep(3600)


def process_or_crash(data: bytes, opts: imaging.PackOptions) -> imaging.EncodedImage:
    _crash_on_marks(data)
    return imaging.process(data, opts)


def process_hashed_or_crash(data: bytes, opts: imaging.PackOptions) -> imaging.EncodedImage:
    """``imaging.process_hashed`` (what pack runs), except on marked bytes."""
    _crash_on_marks(data)
    return imaging.process_hashed(data, opts)


def decode_or_crash(data: bytes, opts: imaging.PackOptions):
    """``imaging.decode``, except on marked bytes (the segmentation image decode)."""
    if data.startswith(SEGFAULT):
        os.kill(os.getpid(), signal.SIGSEGV)
    return imaging.decode(data, opts)


def convert_or_crash(data_and_key: tuple[bytes, str], converter):
    """``MaskConverter.convert``, except on marked bytes (the mask conversion)."""
    data, key = data_and_key
    if data.startswith(SEGFAULT):
        os.kill(os.getpid(), signal.SIGSEGV)
    return converter.convert(data, key)
