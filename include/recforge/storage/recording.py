"""What a stage wrote: sizes, SHA-256s and ETags, recorded where the bytes are written.

A write that is no stage's output (a version's claim, touched while stages run) is made
inside :func:`unrecorded`, so no stage's record lists it."""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Iterator

_recorders: list[tuple[str, dict]] = []
_recorders_lock = threading.Lock()
_unrecorded = threading.local()


@contextlib.contextmanager
def record_writes(prefix_uri: str) -> Iterator[dict[str, dict]]:
    """Collect every object this process writes under ``prefix_uri`` (``put_bytes`` and
    ``upload``, from any thread) while the block runs: ``{key relative to the prefix:
    {"size", "sha256", "etag"[, "checksum"]}}``. The digest is of the bytes sent, so
    nothing is read back."""
    written: dict[str, dict] = {}
    entry = (prefix_uri.rstrip("/") + "/", written)
    with _recorders_lock:
        _recorders.append(entry)
    try:
        yield written
    finally:
        with _recorders_lock:  # by identity: a block on the same prefix has equal records
            _recorders[:] = [e for e in _recorders if e is not entry]


@contextlib.contextmanager
def unrecorded() -> Iterator[None]:
    """Writes this thread makes in the block are in no recording block's record."""
    depth = getattr(_unrecorded, "depth", 0)
    _unrecorded.depth = depth + 1
    try:
        yield
    finally:
        _unrecorded.depth = depth


def active() -> bool:
    """Whether a write now would be recorded (else it skips the HEAD a record needs)."""
    return bool(_recorders) and not getattr(_unrecorded, "depth", 0)


def record(uri: str, size: int, sha256: str, etag: str, checksum: str | None = None) -> None:
    """Note one written object in every recording block whose prefix holds it (with the
    store's checksum, where it keeps one), unless the write is :func:`unrecorded`."""
    if not active():
        return
    entry = {"size": size, "sha256": sha256, "etag": etag,
             **({"checksum": checksum} if checksum else {})}
    with _recorders_lock:
        for prefix, written in _recorders:
            if uri.startswith(prefix):
                written[uri[len(prefix):]] = dict(entry)


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def file_digest(path: str | os.PathLike) -> dict:
    """``{"size": bytes, "sha256": hex}`` of a local file, read in 1 MiB chunks."""
    import hashlib

    h, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return {"size": size, "sha256": h.hexdigest()}


WRITE_BUFFER = 1 << 20


class HashingWriter:
    """A local binary file that keeps its size and SHA-256 as it is written (a context
    manager); ``digest()`` is ``file_digest``'s answer without reading the file again."""

    def __init__(self, path: str | os.PathLike):
        import hashlib

        # a large buffer: each flush releases the GIL, and a thread beside this one (an
        # import, a compose) can then hold it for a switch interval per flush
        self._f = open(path, "wb", buffering=WRITE_BUFFER)  # noqa: SIM115 (closed by close)
        self._h = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> None:
        self._f.write(data)
        self._h.update(data)
        self.size += len(data)

    def digest(self) -> dict:
        return {"size": self.size, "sha256": self._h.hexdigest()}

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> HashingWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
