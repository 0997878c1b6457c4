"""dHash: the same photo re-encoded or resized stays close, different photos stay far."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import skimage.data

from recforge import phash
from recforge.dev.scale import clustered_hashes
from recforge.phash import dhash, hamming, near_pairs, nearest_across, popcount64, to_uint64


def _bgr(name: str) -> np.ndarray:
    img = getattr(skimage.data, name)()
    if img.ndim == 2:
        img = np.stack([img] * 3, axis=-1)
    return np.ascontiguousarray(img[..., :3][..., ::-1])


@pytest.fixture(scope="module")
def astronaut() -> np.ndarray:
    return _bgr("astronaut")


def test_format_and_determinism(astronaut):
    h = dhash(astronaut)
    assert len(h) == 16 and int(h, 16) >= 0
    assert dhash(astronaut.copy()) == h


def _record_shapes():
    """Every shape a record with a 256-px short side takes up to 4:1, a grid of small
    shapes (integer ratios among them: OpenCV's other arithmetic), and enlargements."""
    yield from ((256, w) for w in range(256, 1025, 3))
    yield from ((h, 256) for h in range(257, 1025, 3))
    yield from ((8 * a + b, 9 * c + d) for a in range(1, 12) for c in range(1, 12)
                for b in (0, 3) for d in (0, 5))
    yield from ((4, 4), (8, 5), (7, 40), (1200, 1800))


def test_the_area_shrink_is_opencvs_to_the_byte(astronaut):
    """``area_9x8`` is OpenCV's ``INTER_AREA`` resize to 9x8, byte for byte: the published
    ``phash`` of every record depends on it. Noise, smooth gradients, flat images and
    crops of a photo, in every shape a record takes."""
    rng = np.random.default_rng(7)
    grey = cv2.cvtColor(astronaut, cv2.COLOR_BGR2GRAY)
    checked = 0
    for h, w in _record_shapes():
        noise = rng.integers(0, 256, (h, w), dtype=np.uint8)
        photo = cv2.resize(grey, (w, h), interpolation=cv2.INTER_LINEAR)
        for img in (noise, cv2.GaussianBlur(noise, (7, 7), 3), photo,
                    np.full((h, w), 255, np.uint8)):
            want = cv2.resize(img, (9, 8), interpolation=cv2.INTER_AREA)
            got = phash.area_9x8(img)
            assert got.dtype == np.uint8 and np.array_equal(got, want), (h, w)
            checked += 1
    assert checked > 2000


def test_survives_resize_recompression_and_brightness(astronaut):
    h = dhash(astronaut)
    small = cv2.resize(astronaut, None, fx=0.37, fy=0.37, interpolation=cv2.INTER_AREA)
    jpeg = cv2.imdecode(cv2.imencode(".jpg", astronaut, [cv2.IMWRITE_JPEG_QUALITY, 40])[1],
                        cv2.IMREAD_COLOR)
    brighter = cv2.convertScaleAbs(astronaut, alpha=1.1, beta=8)
    for variant in (small, jpeg, brighter):
        assert hamming(h, dhash(variant)) <= 4


def test_different_photos_are_far(astronaut):
    h = dhash(astronaut)
    for other in ("coffee", "chelsea", "rocket", "coins"):
        assert hamming(h, dhash(_bgr(other))) >= 16, other


def test_gray_equals_gray_bgr_and_bgra():
    gray = skimage.data.camera()
    bgr = cv2.cvtColor(gray, cv2.COLOR_GRAY2BGR)
    bgra = cv2.cvtColor(gray, cv2.COLOR_GRAY2BGRA)
    assert dhash(gray) == dhash(bgr) == dhash(bgra) == dhash(gray[:, :, None])


def test_bits_follow_left_right_gradient():
    ramp_down = np.tile(np.arange(90, 0, -1, dtype=np.uint8), (80, 1))  # brighter on the left
    assert dhash(ramp_down) == "f" * 16
    assert dhash(ramp_down[:, ::-1]) == "0" * 16


@pytest.mark.parametrize("bad, match", [
    (np.zeros((8, 8), np.float32), "uint8"),
    (np.zeros((8, 8, 2), np.uint8), "2 channels"),
    (np.zeros((0, 5), np.uint8), "empty"),
    ([[1, 2]], "numpy"),
])
def test_rejects_bad_input(bad, match):
    with pytest.raises(ValueError, match=match):
        dhash(bad)


def test_hamming():
    assert hamming("0" * 16, "f" * 16) == 64
    assert hamming("ff00000000000000", "0f00000000000001") == 5
    with pytest.raises(ValueError, match="different length"):
        hamming("ff", "fff")


@pytest.mark.parametrize("threshold", [0, 2, 4, 7, 12])
def test_near_pairs_equals_brute_force(threshold):
    rng = np.random.default_rng(threshold)
    a = rng.integers(0, 2**63, size=400, dtype=np.uint64) * np.uint64(2)
    b = rng.integers(0, 2**63, size=150, dtype=np.uint64)
    b[:20] = a[:20] ^ np.uint64(0b10110)  # 3 bits
    b[20:25] = a[30:35]  # identical
    b[25:30] = a[40:45] ^ np.uint64(0xFF00)  # 8 bits
    ii, jj, dist = near_pairs(a, b, threshold)
    full = popcount64(a[:, None] ^ b[None, :])
    want_i, want_j = np.nonzero(full <= threshold)
    assert sorted(zip(ii.tolist(), jj.tolist(), strict=True)) == \
        sorted(zip(want_i.tolist(), want_j.tolist(), strict=True))
    assert (dist == full[ii, jj]).all()


def test_near_pairs_is_bounded_never_raises_and_handles_empty():
    same = np.zeros(3000, dtype=np.uint64)  # one flat value: 9 M pairs exactly
    ii, jj, dist = near_pairs(same, same, 4)  # bucket cap: at most 64 per record of a side
    assert 0 < len(ii) <= 64 * 3000 and (dist == 0).all()
    with pytest.raises(ValueError, match="lower quality.near_duplicate_hamming"):
        near_pairs(same, same, 4, max_candidates=1000)  # a caller's own cap on the list
    assert all(len(x) == 0 for x in near_pairs(same[:0], same, 4))
    assert to_uint64(["ffffffffffffffff"])[0] == np.uint64(2**64 - 1)


@pytest.mark.parametrize("threshold", [0, 3, 4, 8])
def test_nearest_across_equals_brute_force(threshold):
    hashes, _ = clustered_hashes(3000, seed=threshold, burst=8)
    a, b = hashes[:2500], hashes[2500:]
    full = popcount64(a[:, None] ^ b[None, :])
    da, pa, db, pb = nearest_across(a, b, threshold, cap=None)
    want_a = np.where(full.min(1) <= threshold, full.min(1), -1)
    want_b = np.where(full.min(0) <= threshold, full.min(0), -1)
    assert (da == want_a).all() and (db == want_b).all()
    hit = da >= 0
    assert (full[np.flatnonzero(hit), pa[hit]] == da[hit]).all()
    assert (pa[~hit] == -1).all()
    # with the default bucket cap the flat images and bursts still give the same answer here
    capped = nearest_across(a, b, threshold)
    assert (capped[0] == da).all() and (capped[2] == db).all()


def test_nearest_across_at_imagenet_size_finds_planted_duplicates():
    """1.28 M clustered hashes (bursts, flat images, biased bits): bounded time and memory."""
    import time

    hashes, cluster = clustered_hashes(1_280_000, seed=3)
    rng = np.random.default_rng(3)
    # val: whole clusters only, so no burst straddles the splits ...
    in_val = rng.random(cluster.max() + 1) < 0.04
    val = in_val[cluster] & (hashes >= 8)  # (flat images are one value in every split)
    a, b = hashes[~val], hashes[val].copy()
    # ... then plant 50 near-duplicates: a train hash with 1-4 bits flipped
    planted = rng.choice(len(b), 50, replace=False)
    sources = rng.choice(len(a), 50, replace=False)
    bits = rng.integers(1, 5, size=50)
    for p, s, k in zip(planted, sources, bits, strict=True):
        flip = rng.choice(64, k, replace=False)
        b[p] = a[s] ^ np.uint64(sum(1 << int(x) for x in flip))
    started = time.perf_counter()
    da, pa, db, pb = nearest_across(a, b, 4)
    assert time.perf_counter() - started < 120
    assert (db[planted] >= 0).all() and (db[planted] <= bits).all()
    found = np.flatnonzero(db >= 0)
    assert set(planted) <= set(found.tolist())
    assert (popcount64(b[found] ^ a[pb[found]]) == db[found]).all()


PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "coins", "camera", "immunohistochemistry")


@pytest.mark.parametrize("resize", [0, 256, 100])
def test_pack_hashes_the_pixels_it_encodes_as_a_reader_would_see_them(resize):
    """pack hashes the record's pixels before encoding them (``process_hashed``); a reader
    hashes what it decodes from the record. They agree to within 2 bits, and the record
    itself is exactly ``process``'s."""
    from recforge.imaging import PackOptions, process, process_hashed
    from recforge.phash import dhash_encoded

    opts = PackOptions(resize=resize, quality=95)
    for name in PHOTOS:
        source = cv2.imencode(".jpg", _bgr(name), [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes()
        hashed, plain = process_hashed(source, opts), process(source, opts)
        assert plain.phash is None
        assert (hashed.data, hashed.height, hashed.width) == (plain.data, plain.height,
                                                               plain.width)
        assert hamming(hashed.phash, dhash_encoded(hashed.data)) <= 2, name


def test_sixteen_bit_pixels_hash_as_the_record_decodes():
    from recforge.imaging import PackOptions, process_hashed
    from recforge.phash import dhash_encoded

    deep = (cv2.cvtColor(_bgr("coffee"), cv2.COLOR_BGR2GRAY).astype(np.uint16) * 257)
    source = cv2.imencode(".png", deep)[1].tobytes()
    img = process_hashed(source, PackOptions(resize=0, encoding=".png", quality=3, color=-1))
    assert img.phash == dhash_encoded(img.data)
