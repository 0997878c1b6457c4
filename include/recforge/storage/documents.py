"""JSON and JSON-lines documents, and streamed lines, over ``objects``.

JSON lines have one writer (:func:`jsonl_line`, :func:`jsonl_bytes`) and one reader
(:func:`parse_jsonl`, :func:`iter_jsonl`) for every ``.jsonl`` recforge writes: a row is one
line, and lines are split on ``\\n`` alone. A key or class name may hold any character S3 and
XML allow; ``str.splitlines`` would also break a line at U+0085, U+2028 and U+2029, so the
writer escapes those three as well (valid JSON either way), and a row survives any line
reader a user points at the file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from recforge.storage.objects import get_bytes, iter_chunks, put_bytes

# the line breaks of str.splitlines that JSON leaves raw inside a string (it escapes < 0x20)
_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028",
                              "\u2029": "\\u2029"})
# json.dumps(row, ensure_ascii=False, sort_keys=True) without a new encoder for every row
_ROW_ENCODER = json.JSONEncoder(ensure_ascii=False, sort_keys=True)


def jsonl_line(row) -> str:
    """One JSON-lines row, without its ``\\n``: keys sorted, text as UTF-8, no line break
    any line reader would split at."""
    text = _ROW_ENCODER.encode(row)
    # all three are past ASCII: an ASCII row (most rows) has none to escape
    return text if text.isascii() else text.translate(_LINE_BREAKS)


def jsonl_bytes(rows: Iterable) -> bytes:
    return "".join(jsonl_line(r) + "\n" for r in rows).encode("utf-8")


def parse_jsonl(data: bytes) -> list:
    """The rows of JSON-lines bytes (split on ``\\n`` only; blank lines skipped)."""
    return [json.loads(line) for line in data.split(b"\n") if line.strip()]


def read_json(uri: str):
    return json.loads(get_bytes(uri).decode("utf-8"))


def json_bytes(obj, indent: int | None = 2) -> bytes:
    """The bytes ``write_json`` writes for ``obj``: indented for people to read, or on one
    line (``indent=None``) for a large document only programs read — Python's indenting
    encoder is pure Python, several times slower than the compact one."""
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
    for line in iter_lines(uri):
        if line.strip():
            yield json.loads(line)


def read_jsonl(uri: str) -> list[dict]:
    return parse_jsonl(get_bytes(uri))


def write_jsonl(uri: str, rows) -> str:
    return put_bytes(uri, jsonl_bytes(rows), "application/x-ndjson")
