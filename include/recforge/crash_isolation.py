"""Decoding where a decoder crash costs one image, not the shard.

The decoders are C (libjpeg, libpng, libtiff, libwebp through OpenCV): a crafted or damaged
file can crash one (a segfault, an abort), exhaust memory or make it spin, and that takes
the whole process with it — the Airflow task, or a ``recforge build`` worker — with no
Python exception to turn into a quarantine entry. The stages decode in process (fast); a
shard whose previous attempt died that way (:func:`attempt_marker` finds the marker still
there: ``pack``, and ``convert_masks`` for segmentation masks) is done again with
:class:`IsolatedProcessor`: every input goes through one long-lived child process, and one
whose child dies or does not answer within ``timeout_s`` is quarantined as
``decoder_crashed``, naming how the child ended. Every other input comes back as the
in-process call would have returned it, byte for byte (the same function on the same
bytes); the child is started again for the next one.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import pickle
import signal
from collections.abc import Callable, Iterator

from recforge import storage
from recforge.imaging import ImageRejected, process

log = logging.getLogger(__name__)
TIMEOUT_S = 120.0  # one image; a decode of the largest image pack.max_pixels allows is ~1 s
REASON = "decoder_crashed"
TARGET = process  # what the child runs on each image's bytes (with the pack options)


def _serve(conn, target: Callable, opts) -> None:
    """The child: decode what arrives until told to stop (None) or the pipe closes. What
    the target raises goes back to be raised in the parent as the same type: a refusal
    (``ImageRejected`` and its kinds) by reason and detail, anything else pickled when it
    survives that, else as text."""
    while True:
        try:
            data = conn.recv()
        except EOFError:
            return
        if data is None:
            return
        try:
            conn.send(("ok", target(data, opts)))
        except ImageRejected as exc:
            conn.send(("rejected", type(exc), exc.reason, exc.detail))
        except Exception as exc:  # noqa: BLE001 (raised again in the parent)
            try:
                pickle.loads(pickle.dumps(exc))
                conn.send(("raised", exc))
            except Exception:  # noqa: BLE001 (an exception pickle cannot rebuild)
                conn.send(("error", f"{type(exc).__name__}: {exc}"))


def how_it_ended(exitcode: int | None) -> str:
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        hint = {"SIGKILL": " (killed: out of memory?)", "SIGSEGV": " (a segmentation fault)",
                "SIGABRT": " (the decoder aborted)", "SIGBUS": " (a bus error)"}.get(name, "")
        return f"died of {name}{hint}"
    return f"exited with code {exitcode}"


class IsolatedProcessor:
    """``processor(data)`` = ``target(data, opts)`` (default ``TARGET``: ``data`` an
    image's bytes, ``opts`` the ``PackOptions``), run in a child process; raises what the
    target raises, and ``rejected("decoder_crashed", …)`` when the child dies or stalls on
    the input. A context manager (stops the child).

    The child is spawned, not forked: the parent runs fetch threads, and a forked child
    can inherit a lock one of them held. ``target`` must therefore be importable by name
    (a module-level function)."""

    def __init__(self, opts, target: Callable | None = None, timeout_s: float | None = None,
                 rejected: type[ImageRejected] = ImageRejected):
        self.opts, self.target = opts, target or TARGET
        self.timeout_s = timeout_s or TIMEOUT_S
        self.rejected = rejected  # the refusal a crash raises (MaskRejected for masks)
        self._ctx = multiprocessing.get_context("spawn")
        self._child = None
        self._conn = None
        self.crashes = 0

    def _start(self) -> None:
        parent, child = self._ctx.Pipe()
        self._child = self._ctx.Process(target=_serve, args=(child, self.target, self.opts),
                                        name="recforge-isolated-decoder", daemon=True)
        self._child.start()
        child.close()
        self._conn = parent

    def _stop(self, kill: bool) -> str:
        child, conn = self._child, self._conn
        self._child = self._conn = None
        if kill and child.is_alive():
            child.kill()
        child.join(10)
        conn.close()
        return how_it_ended(child.exitcode)

    def __call__(self, data):
        if self._child is None:
            self._start()
        try:
            self._conn.send(data)
            answered = self._conn.poll(self.timeout_s)  # also true when the child is gone
            msg = self._conn.recv() if answered else None
        except (EOFError, BrokenPipeError, ConnectionResetError):
            msg, answered = None, True
        if msg is None:
            self.crashes += 1
            ended = self._stop(kill=True)
            what = (f"the decoder's child process {ended} on this image" if answered else
                    f"the decoder gave no answer in {self.timeout_s:.0f} s (it loops or "
                    f"stalls on this image); its child process was stopped")
            raise self.rejected(REASON, what)
        if msg[0] == "ok":
            return msg[1]
        if msg[0] == "rejected":
            raise msg[1](msg[2], msg[3])
        if msg[0] == "raised":
            raise msg[1]
        raise RuntimeError(f"isolated decode failed: {msg[1]}")

    def close(self) -> None:
        if self._child is not None:
            try:
                self._conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            self._stop(kill=False)

    def __enter__(self) -> IsolatedProcessor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@contextlib.contextmanager
def attempt_marker(uri: str, what: str) -> Iterator[bool]:
    """Mark an attempt at ``uri`` while the block runs; yields whether the previous attempt
    died without an error (its marker was still there), in which case the block should
    decode in isolation. The marker is removed however the block ends in Python — success
    or an exception, whose retry then runs as usual — so only a process that died leaves
    one behind."""
    isolated = storage.exists(uri)
    if isolated:
        log.warning("%s: the previous attempt died without an error (a decoder crash, the "
                    "memory limit or a kill); decoding each input in a child process, so "
                    "one that kills the decoder is quarantined as %s", what, REASON)
    storage.write_json(uri, {"isolated": isolated})
    try:
        yield isolated
    finally:
        try:
            storage.delete(uri)
        except Exception as exc:  # noqa: BLE001 (the attempt's own outcome matters more)
            log.warning("%s: could not remove %s (%s); a retry will decode in isolation",
                        what, uri, exc)
