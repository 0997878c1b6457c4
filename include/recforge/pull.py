"""A published version in the user's hands: download it verified (``recforge pull``) and open
it from Python (``recforge.open``).

What a target names (:func:`resolve`): a version folder (``.../<name>/<version>``, it holds
``manifest.json``), a dataset prefix (``.../<name>``: the version its ``latest.json`` names),
either with ``@<version>`` for that version of the dataset, or a bare dataset NAME
(``pets``, ``pets@v2026…``): the dataset of the spec of that name, from ``--spec`` or the
specs folder (``recforge.spec.specs_dir()``), under its ``publish.uri``.

:func:`pull` downloads exactly the files the version's manifest lists into a local folder:
small files a few at a time, a large one as parallel ranged reads (``storage.iter_range``),
streamed to ``<name>.partial`` (memory bounded by the reads in flight), each file checked
against its manifest entry with the same check ``recforge verify`` runs
(``releases.check_file``: size and SHA-256, or SHA-256 part by part for a composed file)
before it takes its name; ``manifest.json`` is written last. A second pull of the same folder
resumes: files already there and verified are skipped, a ``.partial`` continues from its
length (and starts over once when what it held was not the file's). A file whose bytes are
not the manifest's raises :class:`recforge.errors.ChecksumMismatch` naming it, and is removed.

Parts: :func:`resolve` (target → version URI), :func:`pull` (→ :class:`Pulled`),
:func:`reader_calls` (how each reader opens what was pulled), :class:`Published` and
:func:`open_version` (``recforge.open``; the object: version, classes, splits; ``pull``,
``local_paths``, ``torch``, ``dali``, ``gluon``), :class:`NoSuchVersion`.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from recforge import releases, storage
from recforge.errors import ChecksumMismatch, RecforgeFailure
from recforge.format import names
from recforge.kinds import Kind, kind_of

PART = 8 << 20  # bytes per ranged GET; a file larger than one part is read in parallel parts
RANGE_THREADS = 8  # ranged GETs of one large file at once (at most that many parts in memory)
FILE_THREADS = 8  # small files fetched at once
PARTIAL = ".partial"  # a file being downloaded: <name>.partial, renamed once verified


class NoSuchVersion(RecforgeFailure, LookupError):
    """The target names no complete published version; the message says what was looked at
    and what exists."""


# ----------------------------------------------------------------------------- resolving


def _split_version(target: str) -> tuple[str, str | None]:
    """``base@version`` → ``(base, version)``; an ``@`` before the last ``/`` is no version."""
    head, sep, tail = target.rpartition("/")
    if "@" not in tail:
        return target, None
    name, _, version = tail.partition("@")
    return head + sep + name, version or None


def _is_name(base: str) -> bool:
    """A bare dataset name: no scheme, no path separator, and no local folder of that name."""
    return "://" not in base and "/" not in base and not Path(base).exists()


def _spec_root(name: str, spec_path: str | os.PathLike | None) -> str:
    """The dataset prefix of the spec named ``name`` (``spec_path``, else the specs folder)."""
    from recforge.spec import load_spec, load_specs, specs_dir

    if spec_path is not None:
        spec = load_spec(spec_path)
        if spec.name != name:
            raise NoSuchVersion(f"the spec {spec_path} is for dataset {spec.name!r}, not "
                                f"{name!r}: give its name, or the spec of {name!r}")
        return releases.dataset_root(spec)
    specs, _ = load_specs(specs_dir())
    found = [s for s in specs if s.name == name]
    if not found:
        known = ", ".join(sorted(s.name for s in specs)) or "none"
        raise NoSuchVersion(f"no dataset spec named {name!r} in {specs_dir()} (its datasets: "
                            f"{known}); give --spec PATH.yaml, or the dataset's URI "
                            "(s3://bucket/prefix/<name>)")
    return releases.dataset_root(found[0])


def resolve(target: str, spec_path: str | os.PathLike | None = None) -> str:
    """The version URI ``target`` names (see the module's docstring); raises
    :class:`NoSuchVersion` naming what is there instead."""
    base, version = _split_version(target)
    root = _spec_root(base, spec_path) if _is_name(base) else base.rstrip("/")
    if version is None:
        found = releases.resolve_version(root)
        if found is None:
            raise NoSuchVersion(f"{root} holds no manifest.json and no complete version: give "
                                "a published version (.../<name>/<version>) or a dataset "
                                "prefix (.../<name>)")
        return found
    uri = storage.join(root, version)
    if releases.read_manifest(uri) is None:
        have = [m["version"] for m in releases.versions(root)]
        raise NoSuchVersion(f"{uri} is no complete version; the versions of {root}: "
                            f"{', '.join(have) or 'none'}")
    return uri


# ----------------------------------------------------------------------------- pulling


@dataclass
class Pulled:
    """What one pull did: the version, the folder, the files fetched and those already
    there (verified), and the bytes read from the store."""

    version_uri: str
    manifest: dict
    dest: Path
    fetched: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    bytes_read: int = 0


def _local_entry(entry: dict) -> dict:
    """A manifest entry as a local copy is checked: the store's own checksum is not the
    file system's."""
    return {k: v for k, v in entry.items() if k != "checksum"}


def _check_local(path: Path, entry: dict) -> str | None:
    return releases.check_file(str(path), _local_entry(entry), name=entry["name"],
                               threads=RANGE_THREADS)


def _safe_path(dest: Path, name: str) -> Path:
    from recforge.storage.uri import unsafe_key_reason

    reason = unsafe_key_reason(name)
    if reason:
        raise ChecksumMismatch(f"the manifest lists {name!r}, which is no safe file name "
                               f"({reason}); the version is damaged: re-publish it")
    return dest / name


def _stream(uri: str, path: Path, start: int, size: int, part: int) -> int:
    """Bytes ``[start, size)`` of ``uri`` appended to ``path``; returns the bytes read."""
    n = 0
    threads = RANGE_THREADS if size - start > part else 1
    with open(path, "ab" if start else "wb") as out:
        for chunk in storage.iter_range(uri, start, size, threads=threads, part=part):
            out.write(chunk)
            n += len(chunk)
    return n


def _fetch_one(version_uri: str, dest: Path, entry: dict, part: int) -> int | None:
    """One file into ``dest``, verified; None when it was there already (verified), else
    the bytes read. A wrong file raises :class:`ChecksumMismatch` and is removed."""
    name, size = entry["name"], entry["size"]
    final = _safe_path(dest, name)
    if final.is_file() and final.stat().st_size == size and _check_local(final, entry) is None:
        return None
    final.unlink(missing_ok=True)
    final.parent.mkdir(parents=True, exist_ok=True)
    partial = final.with_name(final.name + PARTIAL)
    uri = storage.join(version_uri, name)
    have = partial.stat().st_size if partial.is_file() else 0
    start = have if have <= size else 0
    read = _stream(uri, partial, start, size, part)
    problem = _check_local(partial, entry)
    if problem and start:  # what an earlier pull left was not this file's start: once anew
        read += _stream(uri, partial, 0, size, part)
        problem = _check_local(partial, entry)
    if problem:
        partial.unlink(missing_ok=True)
        raise ChecksumMismatch(f"{problem} (downloaded from {uri}; removed from {dest}): the "
                               f"store no longer holds the published bytes; recforge verify "
                               f"{version_uri} lists every difference")
    partial.replace(final)
    return read


def _check_store(version_uri: str, entries: list[dict]) -> None:
    """Every listed object exists with its size (and the store's checksum, where it keeps
    one, is the recorded one), before any byte is downloaded: HEADs only."""
    def one(entry: dict) -> str | None:
        return releases.check_file(storage.join(version_uri, entry["name"]), entry,
                                   name=entry["name"], hash_up_to=-1)

    with ThreadPoolExecutor(FILE_THREADS) as pool:
        problems = [p for p in pool.map(one, entries) if p]
    if problems:
        raise ChecksumMismatch(f"{version_uri} is not as its manifest says: "
                               + "; ".join(problems)
                               + f" (recforge verify {version_uri} lists every difference)")


def _refuse_other_version(dest: Path, manifest: dict) -> None:
    here = dest / names.MANIFEST
    if not here.is_file():
        return
    import json

    theirs = json.loads(here.read_text(encoding="utf-8"))
    if (theirs.get("dataset"), theirs.get("version")) != (manifest.get("dataset"),
                                                          manifest.get("version")):
        raise NoSuchVersion(f"{dest} holds version {theirs.get('version')} of "
                            f"{theirs.get('dataset')}, not {manifest.get('version')} of "
                            f"{manifest.get('dataset')}: pull into another folder, or empty "
                            "this one first")


def pull(version_uri: str, dest: str | os.PathLike, *, part: int = PART,
         progress=None) -> Pulled:
    """Download the version at ``version_uri`` (a resolved version: :func:`resolve`) into
    ``dest``, verified, resuming what an earlier pull there left; ``manifest.json`` last.
    ``progress(name, bytes_read_or_None)`` is called as each file is done (None: it was
    there already)."""
    manifest_bytes = storage.get_bytes(storage.join(version_uri, names.MANIFEST))
    import json

    manifest = json.loads(manifest_bytes)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    _refuse_other_version(dest, manifest)
    entries = sorted(manifest.get("files", []), key=lambda e: e["name"])
    _check_store(version_uri, entries)
    done = Pulled(version_uri, manifest, dest)
    lock = threading.Lock()

    def one(entry: dict) -> None:
        read = _fetch_one(version_uri, dest, entry, part)
        with lock:
            (done.skipped if read is None else done.fetched).append(entry["name"])
            done.bytes_read += read or 0
        if progress is not None:
            progress(entry["name"], read)

    small = [e for e in entries if e["size"] <= part]
    with ThreadPoolExecutor(FILE_THREADS) as pool:  # list(): the first error is raised
        list(pool.map(one, small))
    for entry in (e for e in entries if e["size"] > part):  # each in parallel parts
        one(entry)
    tmp = dest / (names.MANIFEST + PARTIAL)
    tmp.write_bytes(manifest_bytes)
    tmp.replace(dest / names.MANIFEST)
    return done


# ----------------------------------------------------------------------------- readers


def splits_of(manifest: dict) -> list[str]:
    """The version's packed splits, in the order train, val, test, then any other."""
    listed = {e["name"] for e in manifest.get("files", [])}
    found = [n[:-4] for n in listed if n.endswith(".rec") and not n.endswith(
        names.MASK_SUFFIX + ".rec") and "/" not in n]
    order = {s: i for i, s in enumerate(names.SPLITS)}
    return sorted(found, key=lambda s: (order.get(s, len(order)), s))


def label_pad_width(lst_path: str | os.PathLike) -> int:
    """The longest label of a ``.lst`` (im2rec's lines: key, labels, path): what
    ``ImageDetRecordIter(label_pad_width=…)`` needs to hold every image's objects."""
    most = 0
    with open(lst_path, "rb") as f:
        for line in f:
            most = max(most, line.count(b"\t") - 1)
    return most


def paths(dest: str | os.PathLike, split: str, masks: bool = False) -> dict[str, str]:
    """The local files of one split: ``rec``, ``idx``, ``lst`` and, with masks,
    ``mask_rec``, ``mask_idx``."""
    dest = Path(dest)
    out = {"rec": dest / names.rec(split), "idx": dest / names.idx(split),
           "lst": dest / names.lst(split)}
    if masks:
        out |= {"mask_rec": dest / names.rec(split, True),
                "mask_idx": dest / names.idx(split, True)}
    return {k: str(v) for k, v in out.items()}


def _calls_for(dest: Path, split: str, k: Kind) -> list[str]:
    p = paths(dest, split, masks=k.masks)
    rec, idx = p["rec"], p["idx"]
    lines = [f"# {split}"]
    if k.boxes:
        pad = label_pad_width(p["lst"]) if Path(p["lst"]).is_file() else 4 + 6
        lines += [f'mx.io.ImageDetRecordIter(path_imgrec="{rec}", path_imgidx="{idx}", '
                  f"data_shape=(3, 300, 300), batch_size=32, label_pad_width={pad})",
                  f'gluoncv.data.RecordFileDetection("{rec}")']
    else:
        lines.append(f'mx.io.ImageRecordIter(path_imgrec="{rec}", path_imgidx="{idx}", '
                     "data_shape=(3, 224, 224), batch_size=32)")
    lines.append(f'fn.readers.mxnet(path=["{rec}"], index_path=["{idx}"])  # NVIDIA DALI')
    if k.masks:
        lines += [f'fn.readers.mxnet(path=["{p["mask_rec"]}"], index_path=["{p["mask_idx"]}"])'
                  "  # its masks, same order",
                  "recforge.segmentation.dataset.SegmentationRecordDataset"
                  f'("{rec}")  # (image, mask) pairs']
    lines.append(f'recforge.readers.torch.dataset("{dest}", "{split}")  # PyTorch')
    return lines


def reader_calls(dest: str | os.PathLike, manifest: dict) -> str:
    """How MXNet, GluonCV, DALI and PyTorch open each split pulled into ``dest``."""
    dest = Path(dest)
    k = kind_of(manifest)
    out = []
    for split in splits_of(manifest):
        out += _calls_for(dest, split, k)
    return "\n".join(out)


# ----------------------------------------------------------------------------- recforge.open


class Published:
    """One published version, opened by :func:`open_version` (``recforge.open``): ``uri``,
    ``version``, ``task``, ``classes`` (names in label order), ``splits`` (records per
    split), ``manifest``;
    :meth:`pull` brings it here, then :meth:`local_paths`, :meth:`torch`, :meth:`dali` and
    :meth:`gluon` read the local copy."""

    def __init__(self, uri: str, manifest: dict, classes: list[str],
                 local_dir: Path | None = None):
        self.uri, self.manifest, self.classes = uri, manifest, classes
        self.version = manifest.get("version")
        self._kind = kind_of(manifest)
        self.task = self._kind.name
        counts = (manifest.get("summary") or {}).get("splits") or {}
        self.splits = {s: int(counts.get(s, 0)) for s in splits_of(manifest)}
        self.local_dir = local_dir

    def __repr__(self) -> str:
        return (f"Published({self.uri!r}, task={self.task!r}, classes={len(self.classes)}, "
                f"splits={self.splits})")

    def pull(self, dest: str | os.PathLike, **kwargs) -> Pulled:
        """Download this version into ``dest``, verified (:func:`pull`, as ``recforge
        pull``); later calls read that copy."""
        done = pull(self.uri, dest, **kwargs)
        self.local_dir = Path(dest)
        return done

    def local_paths(self, split: str) -> dict[str, str]:
        """The split's local files: ``rec``, ``idx``, ``lst`` (+ ``mask_rec``, ``mask_idx``
        for segmentation)."""
        if self.local_dir is None:
            raise RuntimeError(f"{self.uri} is not pulled here yet: call .pull(DIR) first")
        if split not in self.splits:
            raise KeyError(f"{self.version} has no split {split!r}; its splits: "
                           f"{', '.join(self.splits)}")
        return paths(self.local_dir, split, masks=self._kind.masks)

    def torch(self, split: str, **kwargs):
        """``recforge.readers.torch.dataset(local_dir, split, **kwargs)`` (needs torch)."""
        from recforge.readers import torch as torch_reader

        self.local_paths(split)  # pulled, and the split exists
        return torch_reader.dataset(str(self.local_dir), split, **kwargs)

    def dali(self, split: str) -> dict[str, list[str]]:
        """The keyword arguments of ``nvidia.dali.fn.readers.mxnet`` for the split's images:
        ``fn.readers.mxnet(**ds.dali("train"), random_shuffle=True, name="Reader")``."""
        p = self.local_paths(split)
        return {"path": [p["rec"]], "index_path": [p["idx"]]}

    def gluon(self, split: str):
        """``mx.gluon.data.vision.ImageRecordDataset`` of the split's images when MXNet is
        importable here, else its arguments (``{"filename": …}``; the ``.idx`` beside it)."""
        args = {"filename": self.local_paths(split)["rec"]}
        try:
            import mxnet as mx
        except ImportError:
            return args
        return mx.gluon.data.vision.ImageRecordDataset(**args)


def open_version(uri: str, spec_path: str | os.PathLike | None = None) -> Published:
    """The published version ``uri`` names (:func:`resolve`: a version, a dataset prefix for
    its latest, ``…@<version>``, or a dataset name). A local version folder (a pulled copy)
    reads in place: no pull needed."""
    version_uri = resolve(uri, spec_path)
    manifest = releases.read_manifest(version_uri) or {}
    classes_doc = storage.read_json(storage.join(version_uri, names.CLASSES))
    classes = list(classes_doc.get("classes") or [])
    local = None if storage.is_s3(version_uri) else storage.local_path(version_uri)
    return Published(version_uri, manifest, classes, local)
