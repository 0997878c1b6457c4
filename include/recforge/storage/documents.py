"""JSON and JSON-lines documents, and streamed lines, over ``objects``."""

from __future__ import annotations

from collections.abc import Iterator

from recforge.storage.objects import get_bytes, iter_chunks, put_bytes


def read_json(uri: str):
    import json

    return json.loads(get_bytes(uri).decode("utf-8"))


def json_bytes(obj, indent: int | None = 2) -> bytes:
    """The bytes ``write_json`` writes for ``obj``: indented for people to read, or on one
    line (``indent=None``) for a large document only programs read — Python's indenting
    encoder is pure Python, several times slower than the compact one."""
    import json

    return (json.dumps(obj, indent=indent, sort_keys=True, ensure_ascii=False)
            + "\n").encode("utf-8")


def write_json(uri: str, obj, indent: int | None = 2, **conditions) -> str:
    """Write ``obj`` as JSON (``indent``: see :func:`json_bytes`); returns its SHA-256.
    ``conditions``: see :func:`put_bytes`."""
    return put_bytes(uri, json_bytes(obj, indent), "application/json", **conditions)


def iter_lines(uri: str, digest=None) -> Iterator[bytes]:
    """The lines of an object (split on ``\\n`` only, without it), streamed; ``digest`` (a
    ``hashlib`` object) sees every byte on the way, so one read both parses and checksums."""
    pending = b""
    for chunk in iter_chunks(uri):
        if digest is not None:
            digest.update(chunk)
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        yield from lines
    if pending:
        yield pending


def iter_jsonl(uri: str) -> Iterator[dict]:
    """The rows of a JSON-lines object one by one, without holding the whole text."""
    import json

    for line in iter_lines(uri):
        if line.strip():
            yield json.loads(line)


def read_jsonl(uri: str) -> list[dict]:
    import json

    return [json.loads(line) for line in get_bytes(uri).decode("utf-8").splitlines() if line]


def write_jsonl(uri: str, rows) -> str:
    import json

    return put_bytes(uri, "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n"
                           for r in rows).encode("utf-8"), "application/x-ndjson")
