"""Perceptual hashes for near-duplicate detection across splits (checklist item 12).

A SHA-256 of the source bytes only catches byte-identical copies; the same photo re-encoded,
resized or renamed gets a new SHA but nearly the same *difference hash* (dHash): shrink to 9x8
grey pixels and record, per row, whether each pixel is brighter than its right neighbour.
Resizing, recompression and small colour shifts flip few of the 64 bits, so a small Hamming
distance means "probably the same picture". The pack stage stores ``dhash`` of the record's
pixels in the record manifest (column ``phash``, 16 hex digits); the quality gate compares
hashes across splits with :func:`nearest_across` (bounded memory and time at any size).
"""

from __future__ import annotations

import functools
import math

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
    small = _area_sums(np.ascontiguousarray(img))
    return np.packbits(small[:, :-1] > small[:, 1:]).tobytes().hex()


# the hash's grid: OUT_W x OUT_H grey pixels; images up to AREA_MAX_PIXELS take the numpy path
OUT_W, OUT_H = 9, 8
AREA_MAX_PIXELS = 1 << 21


def area_9x8(gray: np.ndarray) -> np.ndarray:
    """``cv2.resize(gray, (9, 8), interpolation=cv2.INTER_AREA)``, the same bytes, in ~0.3x
    the CPU for a record-sized image (0.07 against 0.21 ms at 256x283): OpenCV's general
    area shrink (``resizeArea_``) walks every source pixel in scalar code, where here the
    same float32 products are summed by numpy in the same order. Its integer-ratio shrink
    (a different arithmetic), an enlargement, or an image past ``AREA_MAX_PIXELS`` (memory:
    the gathered products) stay OpenCV's. ``tests/imaging/test_phash.py`` holds the two
    equal over thousands of shapes."""
    return _area_sums(gray).astype(np.uint8)


def _area_sums(gray: np.ndarray) -> np.ndarray:
    """:func:`area_9x8`'s pixels, as uint8 or as the rounded float32 sums (the same order:
    what the hash compares). Few numpy calls: in a packing process each one costs several
    microseconds, the JPEG codec having just had the caches."""
    import cv2

    h, w = gray.shape
    if (h < OUT_H or w < OUT_W or h * w > AREA_MAX_PIXELS
            or (h % OUT_H == 0 and w % OUT_W == 0)):
        return cv2.resize(gray, (OUT_W, OUT_H), interpolation=cv2.INTER_AREA)
    xs, xw, ys, yw = _area_tables(h, w)
    # per source row, each output column's products in OpenCV's order, summed one after
    # the other (a reduction over the first axis adds whole rows in turn: no pairwise sum);
    # the columns are gathered as rows of the transposed image, a copy of contiguous rows
    # (gathering them from ``gray.T``, a strided view, cost twice the whole shrink), and
    # the ufunc makes the float32 products from the bytes, without a float32 copy first
    rows = np.add.reduce(np.multiply(cv2.transpose(gray)[xs], xw, dtype=np.float32), axis=0)
    sums = np.add.reduce(yw * rows.T[ys], axis=0)
    # cvRound (half to even); a weighted mean of bytes stays within [0, 255.5), so
    # OpenCV's saturation never acts and the sums need no clipping
    return np.rint(sums, out=sums)


@functools.lru_cache(maxsize=4096)
def _area_tables(h: int, w: int) -> tuple:
    """OpenCV's area tables (``computeResizeAreaTab``) for columns, then rows: source
    indices of shape (longest run, outputs) and their weights, shaped to broadcast over
    the other axis (columns: ``(run, OUT_W, 1)``, rows: ``(run, OUT_H, 1)``)."""
    (xs, xw), (ys, yw) = _axis_table(w, OUT_W), _axis_table(h, OUT_H)
    return xs, xw[:, :, None], ys, yw[:, :, None]


@functools.lru_cache(maxsize=4096)
def _axis_table(size: int, out: int) -> tuple[np.ndarray, np.ndarray]:
    """One axis's table, kept per length: records resized to a short side share it on that
    side, so a night meets a few hundred lengths however many images it packs. Built with
    numpy a run at a time (~0.05 ms, against ~0.5 entry by entry), since a pack task's
    process meets most lengths once. Runs shorter than the longest are padded with
    weight 0 at their end (adding 0.0 changes no sum)."""
    scale = 1.0 / (out / size)  # as OpenCV computes it: the inverse of the inverse scale
    runs = [_area_run(d, size, scale) for d in range(out)]
    longest = max(len(sources) for sources, _ in runs)
    index = np.zeros((longest, out), np.intp)
    weights = np.zeros((longest, out), np.float32)
    for d, (sources, run_weights) in enumerate(runs):
        index[:len(sources), d] = sources
        weights[:len(sources), d] = run_weights
    return index, weights


def _area_run(d: int, ssize: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Output ``d``'s sources and float32 weights in OpenCV's order
    (``computeResizeAreaTab``, its double arithmetic): a partial first source, the whole
    ones, a partial last one."""
    f1 = d * scale
    f2 = f1 + scale
    cell = min(scale, ssize - f1)
    s2 = min(math.floor(f2), ssize - 1)
    s1 = min(math.ceil(f1), s2)
    first = s1 - f1 > 1e-3
    last = f2 - s2 > 1e-3
    sources = np.arange(s1 - first, s2 + last, dtype=np.intp)
    weights = np.full(len(sources), 1.0 / cell)
    if first:
        weights[0] = (s1 - f1) / cell
    if last:
        weights[-1] = min(min(f2 - s2, 1.0), cell) / cell
    return sources, weights.astype(np.float32)


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


BUCKET_CAP = 64  # records of the smaller side compared per shared band value (see below)
CHUNK_PAIRS = 1 << 20  # candidate pairs compared per step: bounds the search's memory (~60 MB)


def _bands(max_distance: int) -> list[tuple[int, int]]:
    return _bands_of(HASH_BITS, max_distance)


def _bands_of(bits: int, max_distance: int) -> list[tuple[int, int]]:
    """``bits`` cut into ``max_distance + 1`` bands (fewer, of one bit, if bits are few)."""
    edges = np.unique(np.linspace(0, bits, min(max_distance + 1, bits) + 1).astype(int))
    return list(zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True))


def _band(x: np.ndarray, lo: int, hi: int) -> np.ndarray:
    return (x >> np.uint64(lo)) & np.uint64((1 << (hi - lo)) - 1)


def _without_band(x: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """The 64 - (hi - lo) bits of ``x`` outside the band, packed from bit 0."""
    low = x & np.uint64((1 << lo) - 1)
    return low | ((x >> np.uint64(hi)) << np.uint64(lo)) if hi < HASH_BITS else low


def _expand(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``concatenate([arange(s, s + c) for s, c in zip(starts, counts)])`` without a loop."""
    total = int(counts.sum())
    if not total:
        return np.empty(0, np.int64)
    begin = np.cumsum(counts) - counts
    return np.repeat(starts - begin, counts) + np.arange(total)


def _groups(keys: np.ndarray):
    order = np.argsort(keys, kind="stable")
    uniq, start, count = np.unique(keys[order], return_index=True, return_counts=True)
    return order, uniq, start.astype(np.int64), count.astype(np.int64)


def _rows_pairs(order_x, start_x, count_x, order_y, start_y, count_y):
    """Pairs (x, y) of every shared key: one row per x member, its key's y members as
    partners, cut into steps of about ``CHUNK_PAIRS`` pairs (a row is never cut)."""
    rows = _expand(start_x, count_x)  # positions in order_x
    row_key = np.repeat(np.arange(len(count_x)), count_x)
    per_row = count_y[row_key]
    ends = np.cumsum(per_row)
    lo = 0
    while lo < len(rows):
        hi = int(np.searchsorted(ends, (ends[lo - 1] if lo else 0) + CHUNK_PAIRS, "right"))
        hi = max(hi, lo + 1)
        k, n = row_key[lo:hi], per_row[lo:hi]
        yield (np.repeat(order_x[rows[lo:hi]], n),
               order_y[_expand(start_y[k], n)])
        lo = hi


def _key_pairs(ka: np.ndarray, kb: np.ndarray, cap: int | None, refine=None):
    """Index pairs ``(i, j)`` with ``ka[i] == kb[j]``, in bounded steps.

    A shared key with more than ``cap`` members on both sides is *oversized*: its members are
    keyed again by each key pair of ``refine(i_members, j_members)`` when given, else only
    the first ``cap`` members of the smaller side (in key, then index, order) are paired."""
    oa, ua, sa, ca = _groups(ka)
    ob, ub, sb, cb = _groups(kb)
    _, xa, xb = np.intersect1d(ua, ub, assume_unique=True, return_indices=True)
    sa, ca, sb, cb = sa[xa], ca[xa], sb[xb], cb[xb]
    big = np.zeros(len(ca), bool) if cap is None else np.minimum(ca, cb) > cap
    if big.any():
        if refine is not None:
            ia, ib = oa[_expand(sa[big], ca[big])], ob[_expand(sb[big], cb[big])]
            for ra, rb in refine(ia, ib):  # the oversized keys' members, keyed again
                for x, y in _key_pairs(ra, rb, cap):
                    yield ia[x], ib[y]
            sa, ca, sb, cb = sa[~big], ca[~big], sb[~big], cb[~big]
        else:
            ca = np.where(big & (ca <= cb), cap, ca)
            cb = np.where(big & (cb < ca), cap, cb)
    # rows over the larger side: each row has at most max(cap, smaller side) partners
    over_a = ca >= cb
    yield from _rows_pairs(oa, sa[over_a], ca[over_a], ob, sb[over_a], cb[over_a])
    for y, x in _rows_pairs(ob, sb[~over_a], cb[~over_a], oa, sa[~over_a], ca[~over_a]):
        yield x, y


def iter_candidates(a: np.ndarray, b: np.ndarray, max_distance: int,
                    cap: int | None = BUCKET_CAP):
    """Candidate pairs ``(i, j, distance)`` (distance <= ``max_distance``), in bounded steps;
    a pair may come more than once (once per band it shares).

    Multi-index search: the 64 bits are cut into ``max_distance + 1`` bands; by the
    pigeonhole principle two hashes within the distance agree exactly on at least one band,
    so only records sharing a band value are compared, with sorting on the band keys and
    joins of bounded size. A band value shared by more than ``cap`` records on *both* sides
    (photo bursts, flat images, popular bit patterns) is searched again the same way: its
    members' other bits are cut into ``max_distance + 1`` sub-bands, and pairs sharing the
    band and one sub-band are compared (still exact, by the same principle). The recall
    trade-off, for bounded time at any size: a sub-band value still shared by more than
    ``cap`` records on both sides pairs only ``cap`` records of the smaller side; pairs found
    only there can be missed. Every other pair within the distance is found (exact with
    ``cap=None``). Work per band is at most about
    ``(max_distance + 2) * cap * (len(a) + len(b))`` comparisons.
    """
    if not 0 <= max_distance < HASH_BITS:
        raise ValueError(f"max_distance {max_distance} must be in [0, {HASH_BITS})")
    a = np.asarray(a, dtype=np.uint64)
    b = np.asarray(b, dtype=np.uint64)
    if not len(a) or not len(b):
        return
    bands = _bands(max_distance)
    for lo, hi in bands:
        refine = None
        if hi - lo < HASH_BITS:
            def refine(ia, ib, lo=lo, hi=hi):
                """(band, sub-band) keys: the rest's bits cut into max_distance + 1 parts."""
                rest = HASH_BITS - (hi - lo)
                for slo, shi in _bands_of(rest, max_distance):
                    yield tuple((_band(x, lo, hi) << np.uint64(shi - slo))
                                | _band(_without_band(x, lo, hi), slo, shi)
                                for x in (a[ia], b[ib]))
        for ii, jj in _key_pairs(_band(a, lo, hi), _band(b, lo, hi), cap, refine):
            dist = popcount64(a[ii] ^ b[jj])
            keep = dist <= max_distance
            yield ii[keep], jj[keep], dist[keep]


def near_pairs(a: np.ndarray, b: np.ndarray, max_distance: int,
               max_candidates: int | None = None, cap: int | None = BUCKET_CAP
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs ``(i, j, distance)`` with ``hamming(a[i], b[j]) <= max_distance``, each once,
    by :func:`iter_candidates` (bounded work; see its recall note). More than
    ``max_candidates`` pairs found raises ``ValueError`` (for callers that list them)."""
    a = np.asarray(a, dtype=np.uint64)
    b = np.asarray(b, dtype=np.uint64)
    found = []
    total = 0
    for ii, jj, _ in iter_candidates(a, b, max_distance, cap):
        found.append(np.unique(ii * len(b) + jj))
        total += len(found[-1])
        if max_candidates is not None and total > max_candidates:
            raise ValueError(
                f"near-duplicate search found more than {max_candidates} pairs at "
                f"max_distance {max_distance}; lower quality.near_duplicate_hamming")
    if not found:
        return (np.empty(0, np.int64),) * 3
    flat = np.unique(np.concatenate(found))  # a pair sharing several bands: once
    ii, jj = flat // len(b), flat % len(b)
    return ii, jj, popcount64(a[ii] ^ b[jj])


def _keep_best(best: np.ndarray, partner: np.ndarray, idx: np.ndarray, other: np.ndarray,
               dist: np.ndarray) -> None:
    """``best[i]``/``partner[i]``: the smallest distance per index and its partner (the
    smaller partner index on ties), updated in place from one step's pairs."""
    if not len(idx):
        return
    order = np.lexsort((other, dist, idx))
    idx, other, dist = idx[order], other[order], dist[order]
    first = np.flatnonzero(np.r_[True, idx[1:] != idx[:-1]])
    idx, other, dist = idx[first], other[first], dist[first]
    better = (dist < best[idx]) | ((dist == best[idx]) & (other < partner[idx]))
    best[idx[better]] = dist[better]
    partner[idx[better]] = other[better]


def nearest_across(a: np.ndarray, b: np.ndarray, max_distance: int,
                   cap: int | None = BUCKET_CAP):
    """Per hash of ``a`` its closest hash in ``b`` within ``max_distance`` bits, and per hash
    of ``b`` its closest in ``a``: ``(dist_a, partner_a, dist_b, partner_b)``; distance
    ``-1`` and partner ``-1`` where none. Memory is O(len(a) + len(b)): identical hashes are
    searched once, and only the best pair per hash is kept (never the list of pairs)."""
    a = np.asarray(a, dtype=np.uint64)
    b = np.asarray(b, dtype=np.uint64)
    ua, inv_a = np.unique(a, return_inverse=True)
    ub, inv_b = np.unique(b, return_inverse=True)
    # the lowest original index of each distinct hash names it as a partner
    first_a = np.full(len(ua), len(a), np.int64)
    np.minimum.at(first_a, inv_a, np.arange(len(a)))
    first_b = np.full(len(ub), len(b), np.int64)
    np.minimum.at(first_b, inv_b, np.arange(len(b)))
    none = np.iinfo(np.int64).max
    best_a, part_a = np.full(len(ua), none), np.full(len(ua), none)
    best_b, part_b = np.full(len(ub), none), np.full(len(ub), none)
    for ii, jj, dist in iter_candidates(ua, ub, max_distance, cap):
        _keep_best(best_a, part_a, ii, first_b[jj], dist)
        _keep_best(best_b, part_b, jj, first_a[ii], dist)

    def back(best, part, inv):
        d, p = best[inv], part[inv]
        miss = d == none
        d[miss], p[miss] = -1, -1
        return d, p

    return (*back(best_a, part_a, inv_a), *back(best_b, part_b, inv_b))


def dhash_encoded(data: bytes) -> str | None:
    """dHash of encoded image bytes (what a record holds), decoded as grey; None if the
    bytes do not decode. Packing hashes the pixels before it encodes them
    (``imaging.process_hashed``) and calls this only where it has no pixels of 8 bits."""
    import cv2

    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_GRAYSCALE)
    return None if img is None else dhash(img)
