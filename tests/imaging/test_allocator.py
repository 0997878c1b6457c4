"""A packing process keeps the memory one image frees for the next: decoding and resizing
photo after photo faults no pages in once ``allocator.keep_freed_memory`` has run."""

import os
import subprocess
import sys
import textwrap

import pytest

from recforge import allocator

GLIBC = (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")

# a fresh process (its heap untouched by making the photos) packs the photos twice to warm
# its heap, then three times more, and prints the page faults of those three per image
SCRIPT = textwrap.dedent("""
    import pathlib, resource, sys
    from recforge import allocator
    from recforge.imaging import PackOptions, load, encode
    if sys.argv[1] == "keep":
        assert allocator.keep_freed_memory() and allocator.keep_freed_memory()
    photos = [p.read_bytes() for p in sorted(pathlib.Path(sys.argv[2]).glob("*.jpg"))]
    opts = PackOptions(resize=256, quality=95, interpolation="auto")
    def faults():
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(2):
        for data in photos:
            encode(load(data, opts), opts)
    before = faults()
    for _ in range(3):
        for data in photos:
            encode(load(bytes(data), opts), opts)
    print((faults() - before) / (3 * len(photos)))
""")


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """Small photos and large ones in turn, as a dataset mixes them."""
    import cv2
    import numpy as np

    root = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(3)
    for i in range(12):
        h, w = (330 + 11 * i, 420 + 7 * i) if i % 2 else (880 + 23 * i, 1250 + 19 * i)
        img = cv2.GaussianBlur(rng.integers(0, 255, (h, w, 3), dtype=np.uint8), (7, 7), 0)
        ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])
        (root / f"{i:02d}.jpg").write_bytes(buf.tobytes())
    return root


def faults_per_image(mode: str, photos) -> float:
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode, str(photos)], capture_output=True,
                         text=True, check=True)
    return float(out.stdout.split()[-1])


@pytest.mark.skipif(not GLIBC, reason="the thresholds are glibc's malloc's")
def test_kept_memory_serves_the_next_image_without_page_faults(photos):
    left = faults_per_image("default", photos)
    kept = faults_per_image("keep", photos)
    # glibc's default hands some of every image's buffers back: the check can tell
    assert left > 10, f"{left} page faults an image with malloc's defaults"
    assert kept < 2, f"{kept} page faults an image with freed memory kept"


def test_another_c_library_is_left_alone(monkeypatch):
    monkeypatch.setattr(allocator, "_kept", False)
    monkeypatch.setattr(allocator.os, "confstr", lambda name: "musl libc 1.2")
    assert allocator.keep_freed_memory() is False
    assert allocator._kept is False
