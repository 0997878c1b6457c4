"""The night's photos: small real JPEGs in ImageNet's shape (1,000 ``nXXXXXXXX/`` class
folders), generated fast and uploaded to S3 with a thread pool.

A few hundred base images (crops of ``bench_pack``'s scikit-image photos under a texture and
noise) are made once, before the generating processes fork; each image is a crop of one of
them at its own size (64-256 px sides), flipped or not, with its own brightness, contrast
and a coloured patch, encoded at its own quality, so its dHash and bytes are its own
(~2-20 KB). Files land in ``<cache>/<count>-<seed>/`` (reused
when complete). A few quarantinable objects go in beside them: truncated JPEGs, zero-byte
files and non-images under ``.JPEG`` names.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import cv2
import numpy as np

CLASSES = 1000
BASES = 300


def wnid(c: int) -> str:
    """An ImageNet-like class folder name (``n01440764`` is class 0)."""
    return f"n{1440764 + c * 9973:08d}"


def image_key(i: int) -> str:
    """Image ``i``'s key under the source prefix: round-robin over the classes."""
    c = i % CLASSES
    return f"{wnid(c)}/{wnid(c)}_{i // CLASSES}.JPEG"


def bases(seed: int = 0, n: int = BASES, side: int = 320) -> list[np.ndarray]:
    """``n`` photo-like BGR images of ``side`` x ``side``: a crop of a photo, a texture and
    noise on top (``bench_pack``'s photos and textures)."""
    from benchmarks.bench_pack import PHOTOS, TEXTURES, _load

    rng = np.random.default_rng(seed)
    photos = [p for p in map(_load, PHOTOS) if p is not None]
    textures = [t for t in map(_load, TEXTURES) if t is not None]
    out = []
    for _ in range(n):
        p = photos[rng.integers(len(photos))]
        ph, pw = p.shape[:2]
        s = rng.uniform(0.3, 1.0)
        ch, cw = int(min(ph, pw) * s), int(min(ph, pw) * s)
        y, x = rng.integers(0, ph - ch + 1), rng.integers(0, pw - cw + 1)
        img = cv2.resize(p[y:y + ch, x:x + cw], (side, side), interpolation=cv2.INTER_AREA)
        t = textures[rng.integers(len(textures))]
        tile = np.tile(t, (side // t.shape[0] + 1, side // t.shape[1] + 1, 1))[:side, :side]
        img = img.astype(np.float32) + (tile.astype(np.float32) - tile.mean()) * rng.uniform(
            0.1, 0.3)
        img += rng.normal(0, 2.0, img.shape).astype(np.float32)
        out.append(np.clip(img, 0, 255).astype(np.uint8))
    return out


_BASES: list[np.ndarray] = []


def variant(i: int, seed: int = 0) -> bytes:
    """Image ``i``: a crop of a base at its own size, look and quality, as JPEG bytes."""
    if not _BASES:
        _BASES.extend(bases(seed))
    rng = np.random.default_rng((seed, i))
    base = _BASES[int(rng.integers(len(_BASES)))]
    side = base.shape[0]
    c = int(rng.integers(side // 3, side + 1))
    y, x = (int(v) for v in rng.integers(0, side - c + 1, size=2))
    w, h = (int(v) for v in rng.integers(64, 257, size=2))
    img = cv2.resize(base[y:y + c, x:x + c], (w, h), interpolation=cv2.INTER_LINEAR)
    if rng.random() < 0.5:
        img = img[:, ::-1]
    img = cv2.convertScaleAbs(img, alpha=float(rng.uniform(0.7, 1.3)),
                              beta=float(rng.uniform(-30, 30)))
    px, py = int(rng.integers(0, w)), int(rng.integers(0, h))
    colour = tuple(int(v) for v in rng.integers(0, 256, size=3))
    cv2.rectangle(img, (px, py), (px + w // 4, py + h // 4), colour, -1)
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, int(rng.integers(70, 96))])
    assert ok
    return buf.tobytes()


def _write_range(args: tuple[Path, int, int, int]) -> int:
    folder, first, last, seed = args
    total = 0
    for i in range(first, last):
        data = variant(i, seed)
        path = folder / image_key(i)
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
        total += len(data)
    return total


def bad_objects(good: bytes) -> dict[str, bytes]:
    """Three of each quarantinable kind, in three class folders."""
    out = {}
    for k in range(3):
        c = wnid(k * 331)
        out[f"{c}/{c}_truncated_{k}.JPEG"] = good[: len(good) // 2]
        out[f"{c}/{c}_empty_{k}.JPEG"] = b""
        out[f"{c}/{c}_notes_{k}.JPEG"] = b"not a picture, a text file\n" * 20
    return out


def generate(cache: Path, count: int, seed: int = 0, procs: int | None = None) -> dict:
    """``count`` images (plus the bad objects) under ``cache/<count>-<seed>/``; returns the
    folder, the seconds taken (0 when reused) and the bytes."""
    folder = cache / f"{count}-{seed}"
    marker = folder / ".complete"
    if marker.exists():
        return {"folder": folder, "seconds": 0.0, "reused": True,
                "bytes": int(marker.read_text())}
    started = time.perf_counter()
    folder.mkdir(parents=True, exist_ok=True)
    procs = procs or os.cpu_count() or 1
    if not _BASES:  # made once here; the forked processes inherit them
        _BASES.extend(bases(seed))
    step = max(1, -(-count // (procs * 8)))
    chunks = [(folder, a, min(a + step, count), seed) for a in range(0, count, step)]
    with ProcessPoolExecutor(procs) as pool:
        total = sum(pool.map(_write_range, chunks))
    for key, data in bad_objects(variant(0, seed)).items():
        (folder / key).parent.mkdir(exist_ok=True)
        (folder / key).write_bytes(data)
    marker.write_text(str(total))
    return {"folder": folder, "seconds": time.perf_counter() - started, "reused": False,
            "bytes": total}


def files_of(folder: Path, count: int) -> list[Path]:
    """The first ``count`` images of a generated folder, and all its bad objects."""
    names = [folder / image_key(i) for i in range(count)]
    bad = [folder / k for k in bad_objects(b"xx")]
    return names + bad


def upload(files: list[Path], folder: Path, prefix: str, threads: int = 32) -> dict:
    """PUT each file to ``<prefix>/<its path under folder>`` from ``threads`` threads;
    returns the count and seconds."""
    from recforge import storage

    client = storage.s3_client()
    bucket, _, key_prefix = prefix.removeprefix("s3://").partition("/")

    def put(path: Path) -> None:
        key = f"{key_prefix}/{path.relative_to(folder).as_posix()}"
        client.put_object(Bucket=bucket, Key=key, Body=path.read_bytes())

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(put, files))
    return {"objects": len(files), "seconds": time.perf_counter() - started}
