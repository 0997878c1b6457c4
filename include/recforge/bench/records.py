"""The data side of the benchmark: the split's files, its records, and the bare-decode limit.

``fetch_split`` gets ``<split>.rec/.idx`` (a local folder is used in place, an ``s3://``
prefix is downloaded and timed). ``bare_decode`` is the reference the loader is compared
with: one Python loop of ``recordio`` reads + ``cv2.imdecode`` over the same records, the
single-core decode limit, so the result shows how close to the limit the loader runs.

``size_check`` counts images smaller than ``data_shape``. MXNet 1.9.1 does NOT fail on them
(see docs/gpu-worker.md): it upscales them (bilinear, aspect kept) and crops, so the
benchmark counts them and warns (``UPSCALE_NOTE``).

``LoaderBenchError`` lives here, on the lowest floor, because every later step raises it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from recforge import storage
from recforge.errors import RecforgeFailure
from recforge.format import names, recordio

UPSCALE_NOTE = (
    "MXNet 1.9.1 ImageRecordIter does not fail on these: it upscales them (bilinear, aspect "
    "kept) until they cover data_shape, then crops, so training sees blurred images. Pack "
    "with pack.resize >= the crop size, or lower data_shape."
)


class LoaderBenchError(RecforgeFailure):
    """The benchmark could not run; the message names the file, the value and the fix."""


def count_records(idx_path: Path) -> int:
    with open(idx_path, encoding="ascii", errors="replace") as f:
        return sum(1 for line in f if line.strip())


def fetch_split(prefix: str, split: str, dest: Path) -> dict:
    """Local folder → used in place; S3 prefix → the split's files downloaded into ``dest``.

    Returns paths and the download time (S3 only), so the result can show S3 read speed.
    """
    required = [names.rec(split), names.idx(split)]
    optional = [names.CLASSES, names.RECORDS, names.rec(split, mask=True),
                names.idx(split, mask=True)]
    if not storage.is_s3(prefix):
        root = storage.local_path(prefix)
        missing = [n for n in required if not (root / n).exists()]
        if missing:
            have = sorted(p.name for p in root.glob("*.rec")) if root.exists() else []
            raise LoaderBenchError(
                f"{root}: {missing} missing; a packed split needs {split}.rec and {split}.idx "
                f"(.rec files there: {have or 'none'}); pass a prefix that holds them or "
                "choose another --split"
            )
        return {"root": root, "download_seconds": None, "downloaded_bytes": 0}
    started = time.perf_counter()
    size = 0
    for name in required + optional:
        uri = storage.join(prefix, name)
        if name in optional and not storage.exists(uri):
            continue
        try:
            storage.download(uri, dest / name)
        except Exception as exc:
            raise LoaderBenchError(
                f"cannot download {uri}: {exc}; check the prefix and that {split}.rec/.idx "
                "were published there"
            ) from exc
        size += (dest / name).stat().st_size
    return {"root": dest, "download_seconds": time.perf_counter() - started,
            "downloaded_bytes": size}


def _record_sizes(root: Path, split: str) -> list[tuple[int, int, int]] | None:
    """(key, height, width) of every record of the split, from the pack manifest."""
    path = root / names.RECORDS
    if not path.exists():
        return None
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            if r.get("split", split) == split and "height" in r and "width" in r:
                out.append((int(r["key"]), int(r["height"]), int(r["width"])))
    return out or None


def bare_decode(rec_path: Path, records: int, min_seconds: float = 0.5,
                max_passes: int = 20) -> dict:
    """The single-core limit: read records with ``recordio`` and ``cv2.imdecode`` them.

    Repeats passes over the same records until ``min_seconds`` so small samples still time
    stably. Also returns the size of every decoded image (for the data_shape check).
    """
    import cv2
    import numpy as np

    payloads = []
    started = time.perf_counter()
    for _, payload in recordio.iter_records(rec_path):
        payloads.append(payload)
        if len(payloads) >= records:
            break
    read_s = time.perf_counter() - started
    if not payloads:
        raise LoaderBenchError(f"{rec_path} holds no records; nothing to benchmark")
    sizes: list[tuple[int, int, int]] = []
    failed = 0
    passes = 0
    t0 = time.perf_counter()
    while True:
        for payload in payloads:
            header, image = recordio.unpack_image_record(payload)
            img = cv2.imdecode(np.frombuffer(image, np.uint8), cv2.IMREAD_COLOR)
            if passes == 0:
                if img is None:
                    failed += 1
                else:
                    sizes.append((header.id, img.shape[0], img.shape[1]))
        passes += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= min_seconds or passes >= max_passes:
            break
    n = len(payloads) * passes
    return {
        "records": len(payloads), "passes": passes, "seconds": round(elapsed, 4),
        "images_per_sec": round(n / elapsed, 1), "threads": 1, "undecodable": failed,
        "read_seconds": round(read_s, 4), "sizes": sizes,
        "method": "recforge.format.recordio.iter_records + cv2.imdecode(IMREAD_COLOR), one thread",
    }


def size_check(sizes: list[tuple[int, int, int]], data_shape: tuple[int, int, int],
               source: str) -> dict:
    """Count images smaller than ``data_shape`` (which MXNet silently upscales)."""
    _, h, w = data_shape
    small = [(k, ih, iw) for k, ih, iw in sizes if ih < h or iw < w]
    smallest = min(sizes, key=lambda s: min(s[1], s[2])) if sizes else None
    return {
        "source": source, "checked": len(sizes), "smaller_than_data_shape": len(small),
        "fraction_smaller": round(len(small) / len(sizes), 6) if sizes else None,
        "examples": [{"key": k, "height": ih, "width": iw} for k, ih, iw in small[:5]],
        "smallest": ({"key": smallest[0], "height": smallest[1], "width": smallest[2]}
                     if smallest else None),
        "min_height": min((s[1] for s in sizes), default=None),
        "min_width": min((s[2] for s in sizes), default=None),
        "behaviour": UPSCALE_NOTE if small else None,
    }
