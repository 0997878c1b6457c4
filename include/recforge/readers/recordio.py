"""Reading a published version's splits back, record by record, from a folder or from S3.

Parts:

- :class:`RecordFile` — one ``.rec`` with its ``.idx`` (local paths or ``s3://`` URIs).
  Each record's byte span is known from the ``.idx`` alone (the next offset in byte order,
  or the end of the file, bounds it), so a record is one ranged GET on S3 (one ``pread``
  locally) and :meth:`RecordFile.read_many` reads a batch through
  ``recforge.storage.read_spans``: records near each other share one coalesced GET.
- :func:`shard_indices` — the records one rank of ``world_size`` reads: every record exactly
  once across the ranks (strided, so each rank's share is spread over the whole file).
- :class:`Sample` — one decoded (or encoded) record: key, image, label / boxes / mask.
- :class:`SplitReader` — one split of a published version (or of a folder holding
  ``<split>.rec/.idx``), for the task the version's manifest names: ``classification``
  (the float label), ``detection`` (the label array, its image size and its objects as an
  ``(n, 6)`` float32 array), ``segmentation`` (the mask from ``<split>_mask.rec``, aligned
  by key).

Pixels: images are decoded with OpenCV (``cv2.imdecode``, as recforge's pack engine and
MXNet's own decoder do) and returned **RGB**, HWC uint8: OpenCV decodes to BGR, and MXNet's
``ImageRecordIter`` / ``mx.image.imdecode`` hand a trainer RGB, so the channels are swapped
once here to match MXNet. Masks are decoded unchanged (``IMREAD_UNCHANGED``): HxW uint8
class ids. With ``decode=False`` the encoded bytes are returned as they are stored.

Memory: a reader holds the split's index (keys, offsets and spans: 24 bytes a record, the
``.idx`` itself is read once) and, while reading, one batch of records (``read_many``,
:meth:`SplitReader.iter_batches`); never the split's image bytes. The floor is beside
``releases`` (it resolves a dataset prefix to its latest complete version), above
``format`` and ``storage``; no MXNet and no torch here (``recforge.readers.torch`` is the
PyTorch layer).
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from recforge import releases, storage
from recforge.format import detection_label, names
from recforge.format.recordio import (
    IRHeader,
    RecordIOError,
    read_record_at,
    unpack_image_record,
)
from recforge.kinds import NAMES, kind

TASKS = tuple(sorted(NAMES))  # the kinds a reader reads, as its error names them
BATCH = 64  # records per batched read in :meth:`SplitReader.iter_batches`


def parse_idx(text: str, name: str) -> tuple[np.ndarray, np.ndarray]:
    """``key<TAB>offset`` lines → ``(keys, offsets)`` int64 arrays in file order; raises
    ``RecordIOError`` naming ``name``, the line and the fix."""
    keys, offsets = [], []
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        fields = line.rstrip("\r").split("\t")
        try:
            key, offset = (int(f) for f in fields) if len(fields) == 2 else (None, None)
        except ValueError:
            key = None
        if key is None or offset < 0:
            raise RecordIOError(f"{name}:{lineno}: expected 'key<TAB>offset' (two integers, "
                                f"offset >= 0), got {line.strip()!r}: the .idx is corrupt; "
                                "re-pack the split (or rebuild the .idx with recforge im2rec)")
        keys.append(key)
        offsets.append(offset)
    return np.asarray(keys, np.int64), np.asarray(offsets, np.int64)


def _spans(offsets: np.ndarray, size: int) -> np.ndarray:
    """Bytes each record may take: up to the next record's offset in byte order, the last
    one up to the end of the file (a record is read from its offset; what follows it in a
    span is never parsed)."""
    order = np.argsort(offsets, kind="stable")
    ends = np.append(offsets[order][1:], size)
    spans = np.empty_like(offsets)
    spans[order] = ends - offsets[order]
    return spans


class RecordFile:
    """One split's ``.rec`` + ``.idx``, local paths or ``s3://`` URIs (S3: ranged reads via
    ``recforge.storage``). ``idx`` defaults to the ``.rec`` with ``.idx`` for a suffix.

    Item ``i`` is the ``i``-th line of the ``.idx`` (file order, as MXNet's
    ``MXIndexedRecordIO.keys``). Picklable: a DataLoader worker reopens the local file."""

    def __init__(self, rec: str, idx: str | None = None):
        self.rec = str(rec)
        self.idx = str(idx) if idx is not None else _idx_for(self.rec)
        for uri in (self.rec, self.idx):
            if not storage.exists(uri):
                raise FileNotFoundError(f"{uri} does not exist: a split is read from "
                                        "<split>.rec with its <split>.idx beside it")
        text = storage.get_bytes(self.idx).decode("ascii", errors="replace")
        self._keys, self._offsets = parse_idx(text, self.idx)
        self.size = storage.size_of(self.rec)
        bad = np.nonzero(self._offsets >= self.size)[0]
        if bad.size:
            raise RecordIOError(f"{self.idx}: key {int(self._keys[bad[0]])} is at byte "
                                f"{int(self._offsets[bad[0]])}, past the end of {self.rec} "
                                f"({self.size} bytes): the .idx belongs to another .rec; "
                                "re-pack the split")
        self._spans = _spans(self._offsets, self.size)
        self._fd: int | None = None
        self._pid: int | None = None

    def __len__(self) -> int:
        return len(self._keys)

    def keys(self) -> list[int]:
        """The ``.idx`` keys in file order."""
        return [int(k) for k in self._keys]

    def span(self, i: int) -> tuple[int, int]:
        """``(offset, bytes)`` of item ``i``'s stretch of the ``.rec``."""
        return int(self._offsets[i]), int(self._spans[i])

    def payload(self, i: int) -> bytes:
        """Item ``i``'s record payload (IRHeader + image), unframed."""
        offset, length = self.span(i)
        return self._parse(i, self._read(offset, length))

    def raw(self, i: int) -> tuple[IRHeader, bytes]:
        """``(header, image bytes)`` of item ``i``: the header has ``flag``, ``label`` (a
        float, or a tuple of floats when ``flag > 0``), ``id`` and ``id2``, as
        ``mx.recordio.unpack`` gives them."""
        return unpack_image_record(self.payload(i))

    def read_many(self, indices: Iterable[int], threads: int = 8) -> list[tuple[IRHeader, bytes]]:
        """``raw`` of each of ``indices``, in the order given. On S3 the spans go through
        ``storage.read_spans``: records close together in the file share one ranged GET."""
        indices = [int(i) for i in indices]
        if not storage.is_s3(self.rec):
            return [self.raw(i) for i in indices]
        spans = [(self.rec, *self.span(i)) for i in indices]
        out: list = [None] * len(indices)

        def use(members, got):
            if isinstance(got, Exception):
                raise got
            for m, data in zip(members, got, strict=True):
                out[m] = unpack_image_record(self._parse(indices[m], data))

        for _ in storage.read_spans(spans, use, threads=threads):
            pass
        return out

    def _parse(self, i: int, data: bytes) -> bytes:
        try:
            got = read_record_at(io.BytesIO(data), 0)
        except RecordIOError as exc:
            raise RecordIOError(f"{self.rec}: key {int(self._keys[i])} at byte "
                                f"{int(self._offsets[i])}: {exc}") from exc
        if got is None:
            raise RecordIOError(f"{self.rec}: key {int(self._keys[i])} at byte "
                                f"{int(self._offsets[i])} is past the end of the file")
        return got[0]

    def _read(self, offset: int, length: int) -> bytes:
        if storage.is_s3(self.rec):
            return storage.get_range(self.rec, offset, length)
        if self._fd is None or self._pid != os.getpid():  # a forked worker opens its own
            self._fd = os.open(storage.local_path(self.rec), os.O_RDONLY)
            self._pid = os.getpid()
        return os.pread(self._fd, length, offset)

    def close(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        self._fd = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_fd": None, "_pid": None}

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001, S110 - interpreter shutdown
            pass


def _idx_for(rec: str) -> str:
    if not rec.endswith(".rec"):
        raise ValueError(f"{rec}: pass the .idx too (a .rec path ending in .rec implies it)")
    return rec[: -len(".rec")] + ".idx"


def shard_indices(n: int, rank: int, world_size: int) -> range:
    """The items rank ``rank`` of ``world_size`` reads: ``rank, rank + world_size, …``.
    Across the ranks every item of ``n`` is read exactly once; shares differ by at most
    one item (no padding: a rank never reads another's record twice)."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} of world_size {world_size}: need world_size >= 1 and "
                         "0 <= rank < world_size (torch.distributed's get_rank / "
                         "get_world_size)")
    return range(rank, n, world_size)


def decode_image(data: bytes) -> np.ndarray:
    """Encoded image → HWC uint8 **RGB** (OpenCV's BGR swapped, as MXNet hands it)."""
    import cv2

    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if img is None:
        raise ValueError(f"{len(data)} bytes do not decode as an image")
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


def decode_mask(data: bytes) -> np.ndarray:
    """Encoded mask → HxW uint8 class ids, unchanged."""
    import cv2

    mask = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    if mask is None or mask.ndim != 2:
        raise ValueError("the mask is not a single-channel image: the split's _mask.rec was "
                         "not packed by recforge; re-pack it")
    return mask


@dataclass
class Sample:
    """One record. ``image``: HWC uint8 RGB (decoded) or the encoded bytes; ``label``: the
    float class id (classification) or the float32 label array (detection); ``boxes``: the
    objects ``(n, 6)`` float32 ``[cls, xmin, ymin, xmax, ymax, difficult]`` normalised to
    the image (detection, padding rows dropped); ``size``: ``(width, height)`` the label
    array states (detection); ``mask``: HxW uint8 class ids, or its bytes (segmentation)."""

    key: int
    image: np.ndarray | bytes
    label: float | np.ndarray | None = None
    boxes: np.ndarray | None = None
    size: tuple[int, int] | None = None
    mask: np.ndarray | bytes | None = field(default=None, repr=False)

    def as_dict(self) -> dict:
        out = {"key": self.key, "image": self.image}
        for name in ("label", "boxes", "size", "mask"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out


def _label(header: IRHeader) -> float | np.ndarray:
    return np.asarray(header.label, np.float32) if header.flag > 0 else float(header.label)


def resolve(uri: str, split: str) -> tuple[str, dict | None]:
    """``(folder, manifest)`` for a version folder, a dataset prefix (its latest complete
    version) or a bare folder holding ``<split>.rec`` (manifest None)."""
    manifest = releases.read_manifest(uri)
    if manifest is not None:
        return uri, manifest
    latest = releases.resolve_latest(uri)
    if latest is not None:
        return latest["uri"], releases.read_manifest(latest["uri"])
    if storage.exists(storage.join(uri, names.rec(split))):
        return uri, None
    raise FileNotFoundError(
        f"{uri} is no published version (no {names.MANIFEST}), no dataset prefix with a "
        f"complete version, and holds no {names.rec(split)}: pass "
        "<publish.uri>/<name>/<version>, <publish.uri>/<name> (its latest), or a folder "
        f"with {names.rec(split)}/.idx")


def task_of(folder: str, manifest: dict | None, split: str) -> str:
    """The manifest's task; without one, ``classes.json``'s, else segmentation where the
    mask ``.rec`` is there, else classification."""
    if manifest and manifest.get("task"):
        return manifest["task"]
    classes = storage.join(folder, names.CLASSES)
    if storage.exists(classes) and storage.read_json(classes).get("task"):
        return storage.read_json(classes)["task"]
    if storage.exists(storage.join(folder, names.rec(split, mask=True))):
        return "segmentation"
    return "classification"


class SplitReader:
    """A published version's split as a sequence of samples (``reader[i]`` → dict with
    ``key``, ``image`` and ``label`` | ``label`` + ``boxes`` + ``size`` | ``mask``).

    ``version_dir_or_uri``: ``<publish.uri>/<name>/<version>`` (local or ``s3://``), the
    dataset prefix (its latest complete version), or any folder with ``<split>.rec/.idx``;
    ``task``: defaults to the manifest's; ``decode``: pixels (RGB) or the stored bytes;
    ``rank`` / ``world_size``: this reader holds :func:`shard_indices`' share only."""

    def __init__(self, version_dir_or_uri: str, split: str, task: str | None = None,
                 decode: bool = True, rank: int = 0, world_size: int = 1):
        self.uri, self.manifest = resolve(str(version_dir_or_uri), split)
        self.split, self.decode = split, decode
        self.task = task or task_of(self.uri, self.manifest, split)
        if self.task not in TASKS:
            raise ValueError(f"task {self.task!r}: one of {', '.join(TASKS)}")
        self._kind = kind(self.task)
        self._check_split()
        self.images = RecordFile(storage.join(self.uri, names.rec(split)),
                                 storage.join(self.uri, names.idx(split)))
        self.masks = None
        if self._kind.masks:
            self.masks = RecordFile(storage.join(self.uri, names.rec(split, mask=True)),
                                    storage.join(self.uri, names.idx(split, mask=True)))
            if not np.array_equal(self.masks._keys, self.images._keys):
                raise RecordIOError(
                    f"{self.masks.idx} is not aligned with {self.images.idx}: "
                    f"{len(self.masks)} vs {len(self.images)} keys or another order; "
                    "re-pack the split")
        self.indices = shard_indices(len(self.images), rank, world_size)

    def _check_split(self) -> None:
        if not self.manifest:
            return
        files = {f.get("name") for f in self.manifest.get("files", [])}
        if names.rec(self.split) not in files:
            held = sorted(s for s in names.SPLITS if names.rec(s) in files)
            raise FileNotFoundError(f"{self.uri} has no split {self.split!r}: it publishes "
                                    f"{', '.join(held) or 'no split'}")

    def __len__(self) -> int:
        return len(self.indices)

    def keys(self) -> list[int]:
        """The record keys this reader holds, in its order."""
        return [int(self.images._keys[i]) for i in self.indices]

    def __getitem__(self, i: int) -> dict:
        return self.samples([i])[0].as_dict()

    def samples(self, items: Sequence[int]) -> list[Sample]:
        """The samples of ``items`` (positions in this reader), read as one batch."""
        n = len(self.indices)
        for i in items:
            if not -n <= i < n:
                raise IndexError(f"item {i} of a reader holding {n} records")
        which = [self.indices[i] for i in items]
        images = self.images.read_many(which)
        masks = self.masks.read_many(which) if self.masks is not None else [None] * len(which)
        return [self._sample(int(self.images._keys[f]), img, m)
                for f, img, m in zip(which, images, masks, strict=True)]

    def _sample(self, key: int, image: tuple, mask: tuple | None) -> Sample:
        header, data = image
        sample = Sample(key=key, image=decode_image(data) if self.decode else data,
                        label=_label(header))
        if self._kind.boxes:
            (w, h), sample.boxes = detection_label.decode(sample.label)
            sample.size = (w, h)
        elif self._kind.masks:
            sample.label = None
            sample.mask = decode_mask(mask[1]) if self.decode else mask[1]
        return sample

    def iter_batches(self, batch_size: int = BATCH) -> Iterator[list[dict]]:
        """This reader's samples in order, ``batch_size`` at a time (one batched read
        each): what is in memory is one batch."""
        for start in range(0, len(self), batch_size):
            items = range(start, min(start + batch_size, len(self)))
            yield [s.as_dict() for s in self.samples(items)]

    def __iter__(self) -> Iterator[dict]:
        for batch in self.iter_batches():
            yield from batch
