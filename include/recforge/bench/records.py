"""The data side of the benchmark: the split's files, its records, and the bare-decode limit.

``fetch_split`` gets a bounded sample of ``<split>.rec/.idx``: the window of the split's
first records that fits ``max_bytes`` (at least one batch), read with ranged GETs and timed,
with an ``.idx`` for just those records; what is timed is what was read, and a 140 GB
ImageNet train split costs one window, not a download. A split within the budget is used in
place (local) or fetched whole (S3). ``bare_decode`` is the reference the loader is compared
with: one Python loop of ``recordio`` reads + ``cv2.imdecode`` over the same records, the
single-core decode limit, so the result shows how close to the limit the loader runs.

``size_check`` counts images smaller than ``data_shape``. MXNet 1.9.1 does NOT fail on them
(see docs/gpu-worker.md): it upscales them (bilinear, aspect kept) and crops, so the
benchmark counts them and warns (``UPSCALE_NOTE``).

``LoaderBenchError`` lives here, on the lowest floor, because every later step raises it.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
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


def fetch_split(prefix: str, split: str, dest: Path, max_bytes: int | None = None,
                min_records: int = 1) -> dict:
    """The split's sample: a local folder within ``max_bytes`` is used in place; otherwise
    the first records whose bytes fit ``max_bytes`` (at least ``min_records``) are read into
    ``dest`` with ranged GETs, with their ``.idx`` (and for segmentation the same keys' masks).

    Returns ``root``, the fetch time and ``downloaded_bytes`` (what was read), ``records_uri``
    (the manifest, streamed later, never downloaded) and ``sample`` (window vs split).
    """
    rec_uri = storage.join(prefix, names.rec(split))
    idx_uri = storage.join(prefix, names.idx(split))
    _require(prefix, split, rec_uri, idx_uri)
    records_uri = storage.join(prefix, names.RECORDS)
    records_uri = records_uri if storage.exists(records_uri) else None
    started = time.perf_counter()
    entries = _idx_entries(idx_uri)
    size = storage.size_of(rec_uri)
    window, end = _window(entries, size, max_bytes, min_records)
    sample = {"records": len(window), "bytes": end, "split_records": len(entries),
              "split_bytes": size, "whole_split": len(window) == len(entries),
              "max_bytes": max_bytes}
    if not storage.is_s3(prefix) and sample["whole_split"]:
        root = storage.local_path(prefix)
        sample["sha256"] = window_digest(root, split)
        return {"root": root, "download_seconds": None,
                "downloaded_bytes": 0, "records_uri": records_uri, "sample": sample}
    dest.mkdir(parents=True, exist_ok=True)
    rec_digest = hashlib.sha256()  # the .rec hashed on its way in, not read back
    got = _fetch_window(rec_uri, dest / names.rec(split), window, end, dest / names.idx(split),
                        rec_digest)
    mask_rec = storage.join(prefix, names.rec(split, mask=True))
    if storage.exists(mask_rec):  # segmentation: the masks of the window's keys
        keys = {k for k, _ in window}
        mask_entries = _idx_entries(storage.join(prefix, names.idx(split, mask=True)))
        mask_window, mask_end = _key_window(mask_entries, keys, storage.size_of(mask_rec))
        got += _fetch_window(mask_rec, dest / names.rec(split, mask=True), mask_window,
                             mask_end, dest / names.idx(split, mask=True))
    classes = storage.join(prefix, names.CLASSES)
    if storage.exists(classes):
        (dest / names.CLASSES).write_bytes(storage.get_bytes(classes))
    sample["sha256"] = window_digest(dest, split, rec_digest if got >= end else None)
    return {"root": dest, "download_seconds": time.perf_counter() - started,
            "downloaded_bytes": got, "records_uri": records_uri, "sample": sample}


PROVENANCE = ("based_on_version",)  # classes.json fields that name a version, not content


def window_digest(root: Path, split: str, rec_hashed=None) -> str:
    """SHA-256 over what the loader reads: the window's ``.rec`` bytes, its ``.idx`` (and the
    masks' for segmentation) and ``classes.json``, each length-prefixed. Equal digests mean
    the loader is handed byte-identical files (``bench.json``'s ``dataset.sample.sha256``).
    ``rec_hashed``: a SHA-256 already fed the ``.rec``'s header and bytes (the fetch hashes
    them on their way), so the file is not read again.

    ``classes.json`` counts without ``based_on_version``: every version names its
    predecessor there, so its bytes differ every night while the classes the benchmark reads
    (``num_classes``, ids, ``ignore_index``) do not, and hashing them made reuse impossible."""
    h = rec_hashed if rec_hashed is not None else hashlib.sha256()
    for name in (names.rec(split), names.idx(split), names.rec(split, mask=True),
                 names.idx(split, mask=True), names.CLASSES):
        if rec_hashed is not None and name == names.rec(split):
            continue
        path = root / name
        if not path.exists():
            h.update(b"-\n")
            continue
        if name == names.CLASSES:
            data = _classes_content(path.read_bytes())
            h.update(f"{name}\t{len(data)}\n".encode())
            h.update(data)
            continue
        h.update(_file_header(name, path.stat().st_size))
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    return h.hexdigest()


def split_identity(files: dict[str, dict], split: str, classes: bytes | None) -> str | None:
    """What the split's files are, from the checksums merge recorded as it composed them
    (``files``: name → entry; a composed ``.rec``'s entry lists its parts' sizes and
    SHA-256s) and ``classes.json``'s bytes: equal identities mean byte-identical ``.rec``,
    ``.idx`` (and masks) and the same classes, so the same window — known without reading
    a byte of it. None when a file the loader reads has no such record."""
    parts = []
    for name in (names.rec(split), names.idx(split), names.rec(split, mask=True),
                 names.idx(split, mask=True)):
        entry = files.get(name)
        if entry is None:
            if name in (names.rec(split), names.idx(split)):
                return None
            parts.append([name, None])
            continue
        what = entry.get("parts") if name.endswith(".rec") else entry.get("sha256")
        if not what:
            return None
        parts.append([name, entry["size"], what])
    parts.append([names.CLASSES, None if classes is None
                  else hashlib.sha256(_classes_content(classes)).hexdigest()])
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _classes_content(data: bytes) -> bytes:
    """``classes.json`` less its provenance, canonical; bytes that are not a JSON object
    count as they are."""
    try:
        doc = json.loads(data)
    except ValueError:
        return data
    if not isinstance(doc, dict):
        return data
    return json.dumps({k: v for k, v in doc.items() if k not in PROVENANCE},
                      sort_keys=True, ensure_ascii=False).encode("utf-8")


def _require(prefix: str, split: str, *uris: str) -> None:
    missing = [u.rsplit("/", 1)[-1] for u in uris if not storage.exists(u)]
    if not missing:
        return
    have = []
    if not storage.is_s3(prefix) and storage.local_path(prefix).exists():
        have = sorted(p.name for p in storage.local_path(prefix).glob("*.rec"))
    raise LoaderBenchError(
        f"{prefix}: {missing} missing; a packed split needs {split}.rec and {split}.idx "
        f"(.rec files there: {have or 'none'}); pass a prefix that holds them or "
        "choose another --split"
    )


def _idx_entries(uri: str) -> list[tuple[int, int]]:
    if not storage.is_s3(uri):
        return recordio.read_idx(storage.local_path(uri))
    with tempfile.TemporaryDirectory(prefix="recforge-idx-") as tmp:
        # the index: ~16 bytes a record (20 MB for ImageNet's train split)
        (Path(tmp) / "split.idx").write_bytes(storage.get_bytes(uri))
        return recordio.read_idx(Path(tmp) / "split.idx")




def _window(entries: list[tuple[int, int]], size: int, max_bytes: int | None,
            min_records: int) -> tuple[list[tuple[int, int]], int]:
    """The first records (in file order) that end within ``max_bytes`` (at least
    ``min_records``), and the byte where the window ends."""
    ordered = sorted(entries, key=lambda e: e[1])
    ends = [o for _, o in ordered[1:]] + [size]
    n = len(ordered) if max_bytes is None else sum(1 for e in ends if e <= max_bytes)
    n = min(len(ordered), max(n, min_records))
    return ordered[:n], (ends[n - 1] if n else 0)


def _key_window(entries: list[tuple[int, int]], keys: set[int], size: int
                ) -> tuple[list[tuple[int, int]], int]:
    """The records of ``keys`` and the byte after the last of them (masks are written in
    the images' key order, so this is a window of the same size)."""
    ordered = sorted(entries, key=lambda e: e[1])
    ends = [o for _, o in ordered[1:]] + [size]
    picked = [i for i, (k, _) in enumerate(ordered) if k in keys]
    return [ordered[i] for i in picked], (ends[picked[-1]] if picked else 0)


def _file_header(name: str, size: int) -> bytes:
    return f"{name}\t{size}\n".encode()


def _fetch_window(uri: str, dest: Path, window: list[tuple[int, int]], end: int,
                  idx_dest: Path, digest=None) -> int:
    """Bytes [0, end) of ``uri`` into ``dest`` (``storage.iter_range``: ranged reads side by
    side, written in order), and an ``.idx`` of ``window``; returns the bytes read.
    ``digest``: a SHA-256 fed the file's :func:`window_digest` header and bytes."""
    read = 0
    if digest is not None:
        digest.update(_file_header(dest.name, end))
    with open(dest, "wb") as f:
        for data in storage.iter_range(uri, 0, end):
            if not data:
                break
            f.write(data)
            if digest is not None:
                digest.update(data)
            read += len(data)
    idx_dest.write_text("".join(f"{k}\t{o}\n" for k, o in sorted(window, key=lambda e: e[0])))
    return read


def record_sizes(records_uri: str | None, split: str) -> list[tuple[int, int, int]] | None:
    """(key, height, width) of every record of the split, streamed from the pack manifest."""
    if records_uri is None:
        return None
    out = []
    for r in storage.iter_jsonl(records_uri):
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
