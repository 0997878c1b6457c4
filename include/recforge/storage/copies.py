"""Server-side copies that keep the source's ETag, and composition of many objects into one by
multipart ``UploadPartCopy``: no byte of a large part passes through this process."""

from __future__ import annotations

import errno
import itertools
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from recforge.storage import checksums, retry
from recforge.storage.bulk import download
from recforge.storage.multipart import MAX_PART, MAX_PARTS, MIN_PART, UPLOAD_PART, Upload
from recforge.storage.objects import (
    ObjectInfo,
    head,
    iter_chunks,
    partial_path,
    size_of,
    upload,
)
from recforge.storage.uri import is_s3, local_path, split_s3

MAX_COPY_OBJECT = 5 * 1024 ** 3  # S3's limit for one CopyObject (and one PUT)


COPY_PART_THREADS = 8  # parts of one multipart object copied at once


def copy(src_uri: str, dst_uri: str) -> None:
    """Server-side copy within S3 (``copy_exact``); otherwise via a temp file."""
    if is_s3(src_uri) and is_s3(dst_uri):
        copy_exact(src_uri, dst_uri)
        return
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        download(src_uri, Path(tmp) / "obj")
        upload(Path(tmp) / "obj", dst_uri)


def copy_exact(src_uri: str, dst_uri: str, composed_of: list[int] | None = None
               ) -> ObjectInfo:
    """Server-side copy whose ETag is the source's and whose SHA-256 the store computes again
    (``checksums``), so comparing either checks the copy.

    A single-part object (at most 5 GB, S3's limit for one PUT) is one CopyObject, which
    keeps its MD5 ETag; a multipart one (one part too: moto's CopyObject gives that an
    MD5) is copied with UploadPartCopy over the source's own part ranges (``HEAD
    ?partNumber=n``), which reproduces its ``<md5 of md5s>-<n>`` ETag; ``COPY_PART_THREADS``
    parts at a time, since on S3 each part copy takes time in proportion to its bytes. No
    byte passes through this process. Returns the destination's size and ETag. Local paths:
    a plain copy (their ETags are mtimes; check those by hashing).

    A store that ignores ``partNumber`` (Ceph RGW 16.2 answers every part's HEAD with the
    whole object) gets the layout recforge itself wrote the object with
    (:func:`written_layout`): ``composed_of``, the sizes of the parts ``compose`` joined, or
    an ``upload``'s equal parts. A layout that is not the source's gives another ETag,
    which the caller's check refuses; none that fits raises ``OSError``."""
    if not (is_s3(src_uri) and is_s3(dst_uri)):
        copy(src_uri, dst_uri)
        return head(dst_uri)
    (sb, sk), (db, dk) = split_s3(src_uri), split_s3(dst_uri)
    src = retry.call("head_object", src_uri, Bucket=sb, Key=sk)
    etag = src["ETag"].strip('"')
    n_parts = int(etag.rsplit("-", 1)[1]) if "-" in etag else 1
    if "-" not in etag and src["ContentLength"] <= MAX_COPY_OBJECT:  # not "<md5s>-1" either
        retry.call("copy_object", dst_uri, CopySource={"Bucket": sb, "Key": sk}, Bucket=db,
                   Key=dk, CopySourceIfMatch=src["ETag"], ChecksumAlgorithm=checksums.ALGORITHM)
        return head(dst_uri)

    def part_size(n: int) -> int:
        return retry.call("head_object", src_uri, Bucket=sb, Key=sk,
                          PartNumber=n)["ContentLength"]

    def copy_part(n_range: tuple[int, int, int]) -> dict:
        n, start, size = n_range
        return up.part_copy(n, src_uri, start, start + size, CopySourceIfMatch=src["ETag"])

    first = retry.call("head_object", src_uri, Bucket=sb, Key=sk, PartNumber=1)
    with Upload(dst_uri, ContentType=src.get("ContentType", "application/octet-stream")) as up:
        # the parts' HEADs, then their copies, COPY_PART_THREADS at a time: a split of
        with ThreadPoolExecutor(COPY_PART_THREADS) as pool:  # 1,000 parts is 2,000 requests
            if "PartsCount" not in first:  # the store does not answer per part
                sizes = written_layout(src["ContentLength"], n_parts, composed_of)
                if sizes is None:
                    raise OSError(f"{src_uri}: the store does not report the sizes of its "
                                  f"{n_parts} parts (HEAD ?partNumber), and it was not "
                                  "written by recforge in a layout known here; copy it with "
                                  "`aws s3 cp` instead")
            else:
                sizes = [first["ContentLength"],
                         *pool.map(part_size, range(2, n_parts + 1))]
            if sum(sizes) != src["ContentLength"]:
                raise OSError(f"{src_uri}: its {n_parts} parts add up to {sum(sizes)} bytes, "
                              f"the object has {src['ContentLength']}; copy it again")
            starts = part_offsets(sizes)
            parts = list(pool.map(copy_part, zip(range(1, n_parts + 1), starts, sizes,
                                                  strict=True)))
        up.complete(parts)
    return head(dst_uri)


def written_layout(size: int, n_parts: int, composed_of: list[int] | None = None
                   ) -> list[int] | None:
    """The part sizes recforge gave a multipart object of ``size`` bytes and ``n_parts``
    parts: ``compose``'s pieces of parts sized ``composed_of``, else ``upload``'s equal
    parts; None if neither has that many parts adding up to ``size``."""
    candidates = []
    if composed_of:
        candidates.append([p[3] if p[0] == "upload" else p[3] - p[2]
                           for p in plan_compose(composed_of)])
    if n_parts > 1:
        candidates.append([UPLOAD_PART] * (n_parts - 1) + [size - UPLOAD_PART * (n_parts - 1)])
    return next((c for c in candidates
                 if len(c) == n_parts and sum(c) == size and min(c) > 0), None)


COMPOSE_THREADS = 8


def part_offsets(sizes: list[int]) -> list[int]:
    """Each part's byte offset in the concatenation of parts of these sizes, in order."""
    return [0, *itertools.accumulate(sizes)][:len(sizes)]


def plan_compose(sizes: list[int]) -> list[tuple[str, int, int, int]]:
    """The pieces of a multipart upload that concatenates parts of these sizes, in order:
    ``("copy", part, start, end)`` is a byte range of one part that S3 copies server-side
    (``UploadPartCopy``); ``("upload", first, last, nbytes)`` is parts ``first..last`` that
    are too small to be a piece alone, downloaded, concatenated and sent as one piece.

    Only the last piece may be under 5 MiB, so the last part is always copied, and a run of
    small parts before it takes in the parts after it until it holds 5 MiB: only small parts
    (and at most the one part that completes a run) move through this process. Empty parts
    are left out; parts over 5 GiB are copied in equal ranges."""
    pieces: list[tuple[str, int, int, int]] = []
    first, pending = None, 0
    last = max((i for i, size in enumerate(sizes) if size), default=-1)
    for i, size in enumerate(sizes):
        if not size:
            continue
        if first is not None or (size < MIN_PART and i != last):  # the last may be small
            first = i if first is None else first
            pending += size
            if pending >= MIN_PART:
                pieces.append(("upload", first, i, pending))
                first, pending = None, 0
            continue
        n = -(-size // MAX_PART)
        pieces += [("copy", i, size * j // n, size * (j + 1) // n) for j in range(n)]
    if first is not None:
        pieces.append(("upload", first, len(sizes) - 1, pending))
    if len(pieces) > MAX_PARTS:
        raise ValueError(f"composing {len(sizes)} parts needs {len(pieces)} multipart pieces; "
                         f"S3 allows at most {MAX_PARTS}: use fewer, larger parts")
    return pieces


def _append_file(src: Path, out) -> None:
    """Append the local file ``src`` to ``out`` (a local file open for binary writing) in the
    kernel (``copy_file_range``: no copy through user space, a block-sharing copy where the
    file system has one); where the kernel cannot join the two files (another file system
    on an older kernel, a platform without the call) the bytes are read and written."""
    out.flush()
    copy_range = getattr(os, "copy_file_range", None)
    with open(src, "rb") as f:
        left, joined = os.fstat(f.fileno()).st_size, False
        if copy_range is not None:
            try:  # a 0 answer: the file shrank under us, what read() would now see
                while left > 0 and (n := copy_range(f.fileno(), out.fileno(), left)):
                    left -= n
                joined = True
            except OSError as exc:
                if exc.errno not in _NO_KERNEL_COPY:
                    raise
        if not joined:  # the kernel moved both offsets by what it copied: on from there
            f.seek(os.lseek(f.fileno(), 0, os.SEEK_CUR))
            shutil.copyfileobj(f, out, 1 << 20)
        out.seek(0, os.SEEK_END)  # the writer's position, past what the kernel wrote


# copy_file_range's answers where the kernel cannot copy between these two files
_NO_KERNEL_COPY = {errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EBADF,
                   errno.EPERM}


def compose(parts: list[str], dest: str, sizes: list[int] | None = None) -> list[int]:
    """Write ``dest`` as the concatenation of ``parts`` (URIs, in order); returns each part's
    byte offset in ``dest``. ``sizes`` (the parts' sizes, when known) saves a HEAD each.

    Between S3 objects this is a multipart upload of server-side copies
    (``plan_compose``): the bytes of parts of 5 MiB or more never pass through this
    process. Anywhere else (a local ``dest`` or local parts) the bytes are concatenated."""
    import logging
    import tempfile

    from recforge.progress import Progress

    sizes = list(sizes) if sizes is not None else [size_of(p) for p in parts]
    bases = part_offsets(sizes)
    log = logging.getLogger(__name__)

    def concatenated(chosen: list[str], out) -> None:
        for uri in chosen:
            for chunk in iter_chunks(uri):
                out.write(chunk)

    def joined_in(path: Path) -> None:
        """``parts`` into the local file ``path``: a local part's bytes copied by the
        kernel, file to file, never through this process's memory."""
        with open(path, "wb") as out:
            for uri in parts:
                if is_s3(uri):
                    concatenated([uri], out)
                else:
                    _append_file(local_path(uri), out)

    pieces = plan_compose(sizes) if is_s3(dest) and all(map(is_s3, parts)) else []
    if len(pieces) == 1 and pieces[0][0] == "copy" and sizes[pieces[0][1]] == sum(sizes) \
            and "-" not in head(parts[pieces[0][1]]).etag:
        copy(parts[pieces[0][1]], dest)  # one single-part object: CopyObject keeps its ETag
        return bases
    # (a multipart one, whose part sizes the store may not tell (Ceph RGW), is one
    # UploadPartCopy below: a layout ``written_layout`` knows, for publish's exact copy)
    if not is_s3(dest):
        path = local_path(dest)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = partial_path(path)
        try:
            joined_in(tmp)
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)
        return bases
    if len(pieces) <= 1 and not any(p[0] == "copy" for p in pieces):
        with tempfile.TemporaryDirectory(prefix="recforge-compose-") as tmp:
            joined = Path(tmp) / "joined"
            joined_in(joined)
            upload(joined, dest)
        return bases

    progress = Progress(f"compose {dest}", len(pieces), log, unit="parts")

    def send(number: int) -> dict:
        kind, a, b, c = pieces[number - 1]
        if kind == "copy":
            return up.part_copy(number, parts[a], b, c)
        with tempfile.SpooledTemporaryFile(max_size=64 << 20) as spool:
            concatenated(parts[a:b + 1], spool)
            return up.part(number, spool)

    with Upload(dest) as up:
        done = []
        with ThreadPoolExecutor(COMPOSE_THREADS) as pool:
            for part in pool.map(send, range(1, len(pieces) + 1)):
                done.append(part)
                progress.update()
        up.complete(done)
    log.info("compose %s: %d parts, %d bytes, %d pieces (%d copied server-side)", dest,
             len(parts), sum(sizes), len(pieces), sum(p[0] == "copy" for p in pieces))
    return bases
