"""S3's additional checksums: SHA-256 that the store computes, checks and keeps per object,
whatever its encryption.

An ETag is an MD5 of the bytes only for unencrypted or SSE-S3 objects; with SSE-KMS or SSE-C
it is opaque, and a copy gets another one. So every object recforge writes is sent with its
SHA-256 (``ChecksumAlgorithm=SHA256`` and the value: the store refuses bytes that do not
match), a multipart one with each part's, and copies ask the store to compute it again.
``HEAD`` with ``ChecksumMode=ENABLED`` gives it back: a base64 SHA-256 of the whole object
(single part), or ``<SHA-256 of the parts' SHA-256s>-<n>`` (multipart). Stores that keep no
additional checksums (older S3-compatible ones) answer without it: then, and only then, the
ETag is what a copy is compared by.
"""

from __future__ import annotations

import base64
import hashlib

ALGORITHM = "SHA256"


def of_hex(sha256_hex: str) -> str:
    """The value S3 gives for an object whose SHA-256 (hex) is ``sha256_hex``."""
    return base64.b64encode(bytes.fromhex(sha256_hex)).decode("ascii")


def of_bytes(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode("ascii")


class Checked(bytes):
    """An object's bytes as a GET gave them, whose SHA-256 (hex, ``sha256``) was computed
    to compare with the store's checksum: :func:`sha256_hex` hands it on instead of
    hashing the bytes again."""

    sha256: str


def checked(data: bytes, sha256_hex: str) -> Checked:
    made = Checked(data)
    made.sha256 = sha256_hex
    return made


def sha256_hex(data: bytes) -> str:
    """The SHA-256 (hex) of ``data``: the one computed already where a GET checked it."""
    known = getattr(data, "sha256", None)
    return known if isinstance(known, str) else hashlib.sha256(data).hexdigest()


def to_send(sha256_hex: str | None = None) -> dict:
    """The request parameters that send a SHA-256 (and, with a value, have it checked)."""
    return {"ChecksumAlgorithm": ALGORITHM,
            **({"ChecksumSHA256": of_hex(sha256_hex)} if sha256_hex else {})}


def of_response(response: dict) -> str | None:
    """The SHA-256 checksum a response carries (HEAD, GET, PUT, a copy's result), if any."""
    value = response.get("ChecksumSHA256")
    return value or None


def is_whole(checksum: str) -> bool:
    """A single-part object's checksum (the SHA-256 of all its bytes), not a composite."""
    return "-" not in checksum


def problem(name: str, have: str | None, entry: dict, source: str | None) -> str | None:
    """What is wrong with an object whose store checksum is ``have``, or None: it must be the
    recorded SHA-256 (a whole-object checksum of an entry with one ``sha256``), the
    ``source``'s (a copy, when both have one), or the entry's ``checksum``."""
    if have is None:
        return None
    if is_whole(have) and entry.get("sha256") and have != of_hex(entry["sha256"]):
        return f"{name}: the store's SHA-256 is not the recorded one (its bytes changed)"
    expected = source or entry.get("checksum")
    if expected and have != expected:
        return f"{name}: the store's SHA-256 checksum {have}, expected {expected}"
    return None
