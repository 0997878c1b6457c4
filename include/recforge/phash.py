"""Perceptual hashes for near-duplicate detection across splits (checklist item 12).

A SHA-256 of the source bytes only catches byte-identical copies; the same photo re-encoded,
resized or renamed gets a new SHA but nearly the same *difference hash* (dHash): shrink to 9x8
grey pixels and record, per row, whether each pixel is brighter than its right neighbour.
Resizing, recompression and small colour shifts flip few of the 64 bits, so a small Hamming
distance means "probably the same picture". The pack stage stores ``dhash`` of the decoded
image in the record manifest (column ``phash``, 16 hex digits); the quality gate compares
hashes across splits with :func:`near_pairs`.
"""

from __future__ import annotations

import numpy as np

HASH_BITS = 64
HEX_DIGITS = HASH_BITS // 4


def dhash(img: np.ndarray) -> str:
    """64-bit difference hash of a uint8 image (gray HxW, or BGR/BGRA HxWxC) as 16 hex digits.

    Bit ``8*r + c`` (most significant first) is 1 when pixel ``(r, c)`` of the 9x8 area-resized
    grey image is brighter than pixel ``(r, c+1)``. Grey conversion uses OpenCV's BGR weights,
    the order pack decodes in; an RGB array hashes slightly differently, so hash what you pack.
    """
    import cv2

    if not isinstance(img, np.ndarray) or img.dtype != np.uint8:
        raise ValueError(
            f"dhash needs a uint8 numpy array, got {type(img).__name__} "
            f"{getattr(img, 'dtype', '')}; decode the image with cv2.imdecode first"
        )
    if img.ndim == 3 and img.shape[2] == 1:
        img = img[:, :, 0]
    if img.ndim == 3:
        code = {3: cv2.COLOR_BGR2GRAY, 4: cv2.COLOR_BGRA2GRAY}.get(img.shape[2])
        if code is None:
            raise ValueError(f"dhash: {img.shape[2]} channels; expected 1, 3 (BGR) or 4 (BGRA)")
        img = cv2.cvtColor(img, code)
    elif img.ndim != 2:
        raise ValueError(f"dhash: image of shape {img.shape}; expected HxW or HxWxC")
    if img.size == 0:
        raise ValueError("dhash: empty image")
    small = cv2.resize(np.ascontiguousarray(img), (9, 8), interpolation=cv2.INTER_AREA)
    bits = (small[:, :-1] > small[:, 1:]).ravel()
    return f"{int(np.packbits(bits).view('>u8')[0]):016x}"


def hamming(a: str, b: str) -> int:
    """Number of differing bits between two hex hashes of equal length."""
    if len(a) != len(b):
        raise ValueError(f"hashes of different length: {a!r} vs {b!r}")
    return (int(a, 16) ^ int(b, 16)).bit_count()


def to_uint64(hashes) -> np.ndarray:
    """Hex strings → uint64 array (for vectorised comparison)."""
    return np.array([int(h, 16) for h in hashes], dtype=np.uint64)


def popcount64(x: np.ndarray) -> np.ndarray:
    """Bits set per element of a uint64 array (SWAR popcount, no Python loop)."""
    x = x.astype(np.uint64, copy=True)
    x -= (x >> np.uint64(1)) & np.uint64(0x5555555555555555)
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return ((x * np.uint64(0x0101010101010101)) >> np.uint64(56)).astype(np.int64)


def near_pairs(a: np.ndarray, b: np.ndarray, max_distance: int,
               max_candidates: int = 50_000_000) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All pairs ``(i, j, distance)`` with ``hamming(a[i], b[j]) <= max_distance``.

    Multi-index search: split the 64 bits into ``max_distance + 1`` bands; by the pigeonhole
    principle two hashes within the distance agree exactly on at least one band, so only pairs
    sharing a band value are compared. Cost grows with the number of such candidates, not with
    ``len(a) * len(b)``; more than ``max_candidates`` raises instead of running for hours.
    """
    if not 0 <= max_distance < HASH_BITS:
        raise ValueError(f"max_distance {max_distance} must be in [0, {HASH_BITS})")
    a = np.asarray(a, dtype=np.uint64)
    b = np.asarray(b, dtype=np.uint64)
    empty = (np.empty(0, np.int64),) * 3
    if not len(a) or not len(b):
        return empty
    nbands = max_distance + 1
    edges = np.linspace(0, HASH_BITS, nbands + 1).astype(int)
    found_i, found_j = [], []
    total = 0
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        mask = np.uint64((1 << int(hi - lo)) - 1)
        va = (a >> np.uint64(lo)) & mask
        vb = (b >> np.uint64(lo)) & mask
        order = np.argsort(vb, kind="stable")
        sorted_b = vb[order]
        start = np.searchsorted(sorted_b, va, side="left")
        stop = np.searchsorted(sorted_b, va, side="right")
        counts = stop - start
        total += int(counts.sum())
        if total > max_candidates:
            raise ValueError(
                f"near-duplicate search needs more than {max_candidates} comparisons at "
                f"max_distance {max_distance}; lower quality.near_duplicate_hamming"
            )
        ii = np.repeat(np.arange(len(a)), counts)
        offsets = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
        jj = order[np.repeat(start, counts) + offsets]
        found_i.append(ii)
        found_j.append(jj)
    ii = np.concatenate(found_i)
    jj = np.concatenate(found_j)
    if not len(ii):
        return empty
    dist = popcount64(a[ii] ^ b[jj])
    keep = dist <= max_distance
    # a pair agreeing on several bands was found several times: keep it once
    flat = np.unique(ii[keep] * len(b) + jj[keep])
    ii, jj = flat // len(b), flat % len(b)
    return ii, jj, popcount64(a[ii] ^ b[jj])


def dhash_encoded(data: bytes) -> str | None:
    """dHash of encoded image bytes (what a record holds), decoded as grey; None if the
    bytes do not decode. Packing calls this on the record it wrote, so the hash describes
    exactly the pixels a reader will get."""
    import cv2

    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_GRAYSCALE)
    return None if img is None else dhash(img)
