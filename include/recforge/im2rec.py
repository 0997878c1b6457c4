"""``recforge im2rec``: a drop-in for MXNet 1.9.1's ``tools/im2rec.py`` that is faster and
never loses an image in silence.

Same arguments, same meaning, same file names (``PREFIX.lst`` in, ``PREFIX.rec`` and
``PREFIX.idx`` out), so a script can swap the command. It differs only where im2rec is
broken (every difference is listed in ``docs/im2rec.md``):

* every ``.lst`` item is packed or written to ``PREFIX.quarantine.tsv`` with a reason and
  a fix, a summary line gives the counts, and the exit status says whether anything was
  quarantined (``EXIT_*`` below);
* output is written under ``*.partial`` names and renamed only when complete, so no
  crash, signal or bad input leaves a partial ``.rec``/``.idx`` behind;
* decoding uses ``recforge.imaging`` (reduced-size JPEG decode, libjpeg warnings are
  errors, anti-aliased default interpolation), in a process pool sized to the cores;
  records come out in ``.lst`` order, byte-identical whatever the worker count;
* no ``import mxnet``: RecordIO framing is ``recforge.format.recordio`` (byte-compatible).
"""

from __future__ import annotations

import argparse
import collections
import math
import os
import random
import signal
import stat
import struct
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field

from recforge import quarantine
from recforge.format import names, recordio

EXIT_OK = 0  # every item packed
EXIT_QUARANTINED = 1  # finished; some items are in PREFIX.quarantine.tsv (or list mode skipped)
EXIT_USAGE = 2  # bad arguments, no .lst found, root missing: nothing written
EXIT_FAILED = 3  # packing failed (write error, worker crash): no output left behind
EXIT_INTERRUPTED = 130  # SIGINT; SIGTERM gives 143. No output left behind.

QUARANTINE_COLUMNS = names.QUARANTINE_TSV_COLUMNS
PROGRESS_EVERY = 1000
CHUNK = 8  # items per pool task: amortises IPC, small enough to keep workers balanced


class _Terminated(BaseException):
    """SIGTERM, turned into an exception so cleanup runs."""


class PackFailed(RuntimeError):
    """Packing could not finish; nothing was written under the final names."""


# ---------------------------------------------------------------- arguments


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """MXNet's help format, without "(default: True)" on our ``--no-*`` switches."""

    def _get_help_string(self, action):
        if isinstance(action, argparse._StoreFalseAction) and action.dest != "shuffle":
            return action.help
        return super()._get_help_string(action)


def make_parser() -> argparse.ArgumentParser:
    """MXNet 1.9.1's parser, argument for argument, plus a group of recforge options."""
    parser = argparse.ArgumentParser(
        prog="recforge im2rec", formatter_class=_HelpFormatter,
        description="Create an image list or make a record database by reading from an "
        "image list (a drop-in for MXNet's tools/im2rec.py; see docs/im2rec.md).",
        epilog="exit status: 0 all packed; 1 finished, some items quarantined (see "
        "PREFIX.quarantine.tsv); 2 usage error, nothing written; 3 packing failed, nothing "
        "written; 130/143 interrupted, nothing written")
    parser.add_argument("prefix", help="prefix of input/output lst and rec files.")
    parser.add_argument("root", help="path to folder containing images.")

    cgroup = parser.add_argument_group("Options for creating image lists")
    cgroup.add_argument("--list", action="store_true",
                        help="If this is set im2rec will create image list(s) by traversing "
                        "root folder and output to <prefix>.lst. Otherwise im2rec will read "
                        "<prefix>.lst and create a database at <prefix>.rec")
    cgroup.add_argument("--exts", nargs="+", default=[".jpeg", ".jpg", ".png"],
                        help="list of acceptable image extensions.")
    cgroup.add_argument("--chunks", type=int, default=1, help="number of chunks.")
    cgroup.add_argument("--train-ratio", type=float, default=1.0,
                        help="Ratio of images to use for training.")
    cgroup.add_argument("--test-ratio", type=float, default=0,
                        help="Ratio of images to use for testing.")
    cgroup.add_argument("--recursive", action="store_true",
                        help="If true recursively walk through subdirs and assign an unique "
                        "label to images in each folder. Otherwise only include images in the "
                        "root folder and give them label 0.")
    cgroup.add_argument("--no-shuffle", dest="shuffle", action="store_false",
                        help="If this is passed, im2rec will not randomize the image order in "
                        "<prefix>.lst")

    rgroup = parser.add_argument_group("Options for creating database")
    rgroup.add_argument("--pass-through", action="store_true",
                        help="whether to skip transformation and save image as is")
    rgroup.add_argument("--resize", type=int, default=0,
                        help="resize the shorter edge of image to the newsize, original "
                        "images will be packed by default.")
    rgroup.add_argument("--center-crop", action="store_true",
                        help="specify whether to crop the center image to make it rectangular.")
    rgroup.add_argument("--quality", type=int, default=95,
                        help="JPEG quality for encoding, 1-100; or PNG compression for "
                        "encoding, 1-9")
    rgroup.add_argument("--num-thread", type=int, default=None,
                        help="number of worker processes for encoding (default: the cores "
                        "this process may use). Output is identical for any value.")
    rgroup.add_argument("--color", type=int, default=1, choices=[-1, 0, 1],
                        help="specify the color mode of the loaded image. 1: Loads a color "
                        "image. Any transparency of image will be neglected. It is the default "
                        "flag. 0: Loads image in grayscale mode. -1:Loads image as such "
                        "including alpha channel.")
    rgroup.add_argument("--encoding", type=str, default=".jpg", choices=[".jpg", ".png"],
                        help="specify the encoding of the images.")
    rgroup.add_argument("--pack-label", action="store_true",
                        help="Whether to also pack multi dimensional label in the record file")

    from recforge.imaging import DEFAULT_MAX_PIXELS, INTERPOLATION_CHOICES

    xgroup = parser.add_argument_group("recforge options (not in MXNet's im2rec)")
    xgroup.add_argument("--interpolation", default="auto", choices=INTERPOLATION_CHOICES,
                        help="resize filter; auto: reduced JPEG decode then linear on the "
                        "exact grid; after a full decode, 2x2 box steps then cubic when "
                        "shrinking >= 2x, else linear; cubic when enlarging. im2rec always "
                        "uses linear")
    xgroup.add_argument("--no-reduced-decode", dest="reduced_decode", action="store_false",
                        help="always decode JPEGs at full size (im2rec's pixels with "
                        "--interpolation linear)")
    xgroup.add_argument("--no-upscale", dest="upscale", action="store_false",
                        help="keep images whose short side is below --resize as they are "
                        "(im2rec enlarges them)")
    xgroup.add_argument("--max-pixels", type=int, default=DEFAULT_MAX_PIXELS,
                        help="decompression-bomb guard: larger images are quarantined")
    xgroup.add_argument("--no-verify", dest="verify", action="store_false",
                        help="with --pass-through, pack bytes without decoding them "
                        "(im2rec's behaviour); only missing/unreadable files are quarantined")
    return parser


def _check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.num_thread is not None and args.num_thread < 1:
        parser.error(f"--num-thread {args.num_thread}: must be >= 1")
    if args.chunks < 1:
        parser.error(f"--chunks {args.chunks}: must be >= 1")
    if not 0 <= args.train_ratio <= 1 or not 0 <= args.test_ratio <= 1:
        parser.error(f"--train-ratio {args.train_ratio} / --test-ratio {args.test_ratio}: "
                     "ratios must be in [0, 1]")
    if args.resize < 0:
        parser.error(f"--resize {args.resize}: must be >= 0 (0 keeps the size)")
    if not 0 <= args.quality <= 100:  # OpenCV clamps PNG levels above 9, as im2rec relies on
        parser.error(f"--quality {args.quality}: JPEG quality is 1-100, PNG compression 0-9")
    if args.max_pixels < 1:
        parser.error(f"--max-pixels {args.max_pixels}: must be >= 1")


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


# ---------------------------------------------------------------- --list mode


def _fs_str(name: str) -> bool:
    return "\t" not in name and "\n" not in name and "\r" not in name


def list_image(root: str, recursive: bool, exts: list[str], skipped: list[str]):
    """im2rec's ``list_image``: same walk, same order, same labels; names that cannot be
    written to a tab-separated line are reported in ``skipped`` instead of breaking it."""
    i = 0
    if recursive:
        cat: dict[str, int] = {}
        for path, dirs, files in os.walk(root, followlinks=True):
            dirs.sort()
            files.sort()
            for fname in files:
                fpath = os.path.join(path, fname)
                suffix = os.path.splitext(fname)[1].lower()
                if os.path.isfile(fpath) and (suffix in exts):
                    if not _fs_str(fpath):
                        skipped.append(fpath)
                        continue
                    if path not in cat:
                        cat[path] = len(cat)
                    yield (i, os.path.relpath(fpath, root), cat[path])
                    i += 1
        for k, v in sorted(cat.items(), key=lambda x: x[1]):
            print(os.path.relpath(k, root), v)
    else:
        for fname in sorted(os.listdir(root)):
            fpath = os.path.join(root, fname)
            suffix = os.path.splitext(fname)[1].lower()
            if os.path.isfile(fpath) and (suffix in exts):
                if not _fs_str(fname):
                    skipped.append(fpath)
                    continue
                yield (i, os.path.relpath(fpath, root), 0)
                i += 1


def _replace_atomically(path: str, text: str) -> None:
    tmp = path + ".partial"
    try:
        with open(tmp, "w", encoding="utf-8", errors="surrogateescape", newline="\n") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise


def write_list(path_out: str, image_list) -> None:
    """im2rec's ``.lst`` line format: ``index\\tlabel\\t...\\tpath`` with ``%f`` labels."""
    lines = []
    for item in image_list:
        line = f"{item[0]:d}\t"
        for j in item[2:]:
            line += f"{j:f}\t"
        lines.append(line + f"{item[1]}\n")
    _replace_atomically(path_out, "".join(lines))


def make_list(args: argparse.Namespace) -> int:
    """im2rec's ``make_list``: same shuffle (``random.seed(100)``), chunks and split files."""
    if not os.path.isdir(args.root):
        print(f"recforge im2rec: error: root {args.root!r} is not a directory; pass the "
              "folder that holds the images", file=sys.stderr)
        return EXIT_USAGE
    skipped: list[str] = []
    image_list = list(list_image(args.root, args.recursive, args.exts, skipped))
    if args.shuffle is True:
        random.seed(100)
        random.shuffle(image_list)
    n = len(image_list)
    chunk_size = (n + args.chunks - 1) // args.chunks
    for i in range(args.chunks):
        chunk = image_list[i * chunk_size:(i + 1) * chunk_size]
        str_chunk = f"_{i:d}" if args.chunks > 1 else ""
        sep = int(chunk_size * args.train_ratio)
        sep_test = int(chunk_size * args.test_ratio)
        if args.train_ratio == 1.0:
            write_list(args.prefix + str_chunk + ".lst", chunk)
        else:
            if args.test_ratio:
                write_list(args.prefix + str_chunk + "_test.lst", chunk[:sep_test])
            if args.train_ratio + args.test_ratio < 1.0:
                write_list(args.prefix + str_chunk + "_val.lst", chunk[sep_test + sep:])
            write_list(args.prefix + str_chunk + "_train.lst", chunk[sep_test:sep_test + sep])
    print(f"im2rec --list: listed {n} images from {args.root}"
          + (f"; skipped {len(skipped)} whose names contain a tab or newline" if skipped
             else ""))
    for p in skipped:
        print(f"recforge im2rec: skipped {p!r}: a tab or newline in the name cannot be "
              "written to a .lst line; rename it", file=sys.stderr)
    return EXIT_QUARANTINED if skipped else EXIT_OK


# ---------------------------------------------------------------- reading the .lst


@dataclass(frozen=True)
class Item:
    """One ``.lst`` line; ``reject`` is set when the line itself is unusable."""

    line: int
    key: int | None
    labels: tuple[float, ...]
    path: str
    reject: tuple[str, str] | None = None


@dataclass(frozen=True)
class Result:
    line: int
    key: int | None
    path: str
    record: bytes | None = None  # the framed record, ready to append to the .rec
    reason: str = ""
    detail: str = ""


class _SeenKeys:
    """Set of record keys; a bitmap for the usual 0..N-1 keys keeps memory tiny."""

    BITMAP_LIMIT = 1 << 28  # 32 MiB of bitmap at most

    def __init__(self):
        self._bits = bytearray()
        self._other: set[int] = set()

    def add(self, key: int) -> bool:
        """Record ``key``; False if it was already there."""
        if key < self.BITMAP_LIMIT:
            byte, bit = divmod(key, 8)
            if byte >= len(self._bits):
                self._bits.extend(bytes(max(byte + 1 - len(self._bits), len(self._bits))))
            if self._bits[byte] >> bit & 1:
                return False
            self._bits[byte] |= 1 << bit
            return True
        if key in self._other:
            return False
        self._other.add(key)
        return True


def _outside_root(path: str) -> bool:
    if os.path.isabs(path):
        return True
    norm = os.path.normpath(path)
    return norm == ".." or norm.startswith(".." + os.sep)


def parse_list(path: str):
    """Yield an ``Item`` per non-blank ``.lst`` line, im2rec's parsing rules, rejects kept."""
    seen = _SeenKeys()
    with open(path, encoding="utf-8", errors="surrogateescape", newline=None) as fin:
        for lineno, raw in enumerate(fin, 1):
            if not raw.strip():
                continue
            fields = [f.strip() for f in raw.strip().split("\t")]
            if len(fields) < 3:
                yield Item(lineno, None, (), fields[-1], ("bad_lst_line", (
                    f"{len(fields)} tab-separated field(s); need index, label(s), path")))
                continue
            try:
                key = int(fields[0])
                labels = tuple(float(x) for x in fields[1:-1])
                if not all(math.isfinite(x) for x in labels):
                    raise ValueError(f"label(s) {fields[1:-1]} not finite (NaN/inf)")
                recordio.pack_header(list(labels), max(key, 0))  # float32 / uint64 range
                if key < 0:
                    raise ValueError(f"index {key} is negative")
            except (ValueError, OverflowError, struct.error) as exc:
                yield Item(lineno, None, (), fields[-1], ("bad_lst_line", f"{exc}"))
                continue
            rel = fields[-1]
            if not rel:
                yield Item(lineno, key, labels, rel, ("bad_lst_line", "the path is empty"))
            elif _outside_root(rel):
                yield Item(lineno, key, labels, rel, (
                    "outside_root", "absolute path or '..' escapes ROOT"))
            elif not seen.add(key):
                yield Item(lineno, key, labels, rel, (
                    "duplicate_key", f"index {key} was already used by an earlier line"))
            else:
                yield Item(lineno, key, labels, rel)


# ---------------------------------------------------------------- encoding one item


@dataclass(frozen=True)
class Config:
    root: str
    opts: object  # imaging.PackOptions
    pass_through: bool
    verify: bool
    pack_label: bool


class _Refused(Exception):
    """The path is not something to read: ``reason``, ``detail``."""


_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISDIR, "a directory"))


def _kind(mode: int) -> str | None:
    """What a non-regular file is; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def _read(root: str, rel: str) -> bytes:
    """The bytes of ``ROOT/rel``, refusing what must not be read: a path whose symbolic
    links lead out of ROOT, and anything but a regular file (a FIFO named ``.jpg`` would
    block the read for ever, ``/dev/zero`` would never end). The open is non-blocking and
    the type is checked again on the open file, so a swap after the check changes nothing."""
    fullpath = os.path.join(root, rel)
    real, real_root = os.path.realpath(fullpath), os.path.realpath(root)
    if os.path.commonpath([real, real_root]) != real_root:
        raise _Refused("outside_root", f"a symbolic link leads out of ROOT, to {real}")
    what = _kind(os.stat(fullpath).st_mode)
    if what is None:
        fd = os.open(fullpath, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
        with os.fdopen(fd, "rb") as f:
            what = _kind(os.fstat(fd).st_mode)
            if what is None:
                return f.read()
    raise _Refused("not_regular_file", f"{fullpath} is {what}, not a regular file")


def encode_item(cfg: Config, item: Item) -> Result:
    """One ``.lst`` item → a framed record or a quarantine reason. Pure: same in, same out."""
    from recforge.imaging import ImageRejected, process, verify

    if item.reject:
        return Result(item.line, item.key, item.path, None, *item.reject)
    fullpath = os.path.join(cfg.root, item.path)
    try:
        data = _read(cfg.root, item.path)
    except _Refused as exc:
        return Result(item.line, item.key, item.path, None, *exc.args)
    except FileNotFoundError:
        return Result(item.line, item.key, item.path, None, "missing",
                      f"no file at {fullpath}")
    except (OSError, ValueError) as exc:
        return Result(item.line, item.key, item.path, None, "read_error",
                      f"{type(exc).__name__}: {exc}")
    try:
        if cfg.pass_through:
            if cfg.verify:
                verify(data, cfg.opts)
            image = data
        else:
            image = process(data, cfg.opts).data
        label = (list(item.labels) if cfg.pack_label and len(item.labels) > 1
                 else item.labels[0])
        payload = recordio.pack_image_record(label, item.key, image)
        record = recordio.frame(payload)
    except ImageRejected as exc:
        return Result(item.line, item.key, item.path, None, exc.reason, exc.detail)
    except recordio.RecordIOError as exc:
        return Result(item.line, item.key, item.path, None, "too_large", str(exc))
    return Result(item.line, item.key, item.path, record)


_WORKER_CFG: Config | None = None


def _init_worker(cfg: Config) -> None:
    """Pool worker setup: leave SIGINT/SIGTERM to the parent, which stops the pool and
    cleans up. (OpenCV runs one thread here: set in the parent before the fork, because
    ``cv2.setNumThreads`` in a forked child can hang: ``imaging.one_opencv_thread``.)"""
    global _WORKER_CFG
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _WORKER_CFG = cfg


def _encode_chunk(items: list[Item]) -> list[Result]:
    return [encode_item(_WORKER_CFG, it) for it in items]


def _chunks(items, size: int):
    batch: list[Item] = []
    for it in items:
        batch.append(it)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def encode_all(cfg: Config, items, workers: int):
    """Yield a ``Result`` per item, in input order, whatever ``workers`` is.

    A sliding window of at most ``4 * workers`` chunks is in flight, so memory stays
    bounded however long the list is.
    """
    from recforge.allocator import keep_freed_memory

    keep_freed_memory()  # set before the workers fork: they inherit it
    if workers <= 1:
        for it in items:
            yield encode_item(cfg, it)
        return
    import multiprocessing

    from recforge.imaging import one_opencv_thread

    with one_opencv_thread():  # in the parent while it forks: the workers start with it
        ctx = multiprocessing.get_context("fork")  # workers start in ms, share the imports
        pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker,
                                   initargs=(cfg,))
        window: collections.deque = collections.deque()
        try:
            for batch in _chunks(items, CHUNK):
                window.append((batch, pool.submit(_encode_chunk, batch)))
                if len(window) >= 4 * workers:
                    yield from _collect(window.popleft())
            while window:
                yield from _collect(window.popleft())
        except BaseException:  # error, signal, or the consumer gave up: stop workers now
            _kill_pool(pool)
            raise
    pool.shutdown(wait=True)


def _kill_pool(pool: ProcessPoolExecutor) -> None:
    """Stop a pool whose workers may be stuck (a blocking read, a runaway decode):
    ``shutdown`` alone would wait for them."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(5)


def _collect(entry) -> list[Result]:
    batch, fut = entry
    try:
        return fut.result()
    except BrokenProcessPool as exc:
        names = ", ".join(repr(it.path) for it in batch)
        raise PackFailed(f"a worker process died (killed, out of memory, or a decoder "
                         f"crash) while encoding one of: {names}; no output was written. "
                         "Re-run; if it recurs, quarantine those files or check memory"
                         ) from exc


# ---------------------------------------------------------------- writing one .lst


@dataclass
class Counts:
    listed: int = 0
    packed: int = 0
    by_reason: collections.Counter = field(default_factory=collections.Counter)

    @property
    def quarantined(self) -> int:
        return sum(self.by_reason.values())


def _tsv(value) -> str:
    return str("" if value is None else value).translate({9: " ", 10: " ", 13: " "})


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def output_paths(lst_path: str, working_dir: str) -> dict[str, str]:
    """im2rec's naming: ``<lst stem>.rec``/``.idx`` in the working dir; ours adds the
    quarantine report next to them."""
    stem = os.path.splitext(os.path.basename(lst_path))[0]
    return {k: os.path.join(working_dir, stem + ext) for k, ext in
            (("rec", ".rec"), ("idx", ".idx"), ("quarantine", ".quarantine.tsv"))}


def pack_list(lst_path: str, working_dir: str, cfg: Config, workers: int) -> Counts:
    """Pack one ``.lst`` into its ``.rec``/``.idx``/``.quarantine.tsv``, all or nothing."""
    out = output_paths(lst_path, working_dir)
    tmp = {k: v + ".partial" for k, v in out.items()}
    counts = Counts()
    started = last = time.monotonic()
    try:
        with recordio.RecordWriter(tmp["rec"], tmp["idx"]) as writer, \
                open(tmp["quarantine"], "w", encoding="utf-8", errors="surrogateescape",
                     newline="\n") as qf:
            qf.write("\t".join(QUARANTINE_COLUMNS) + "\n")
            for res in encode_all(cfg, parse_list(lst_path), workers):
                counts.listed += 1
                if res.record is not None:
                    writer.write_framed(res.key, res.record)
                    counts.packed += 1
                else:
                    counts.by_reason[res.reason] += 1
                    qf.write("\t".join(_tsv(v) for v in (
                        res.line, res.key, res.path, res.reason, res.detail,
                        quarantine.FIXES.get(res.reason, ""))) + "\n")
                if counts.listed % PROGRESS_EVERY == 0:
                    now = time.monotonic()
                    print(f"time: {now - last:.3f}  count: {counts.listed}  "
                          f"({counts.listed / max(now - started, 1e-9):.0f} img/s)", flush=True)
                    last = now
            writer.sync()
            qf.flush()
            os.fsync(qf.fileno())
        # The .idx goes last: whenever a .idx exists, its .rec is complete and matches.
        os.replace(tmp["quarantine"], out["quarantine"])
        _unlink(out["idx"])
        os.replace(tmp["rec"], out["rec"])
        os.replace(tmp["idx"], out["idx"])
    except BaseException:
        for p in tmp.values():
            _unlink(p)
        raise
    return counts


def _summary(lst: str, working_dir: str, counts: Counts, seconds: float) -> str:
    out = output_paths(lst, working_dir)
    reasons = ", ".join(f"{r} {n}" for r, n in sorted(counts.by_reason.items()))
    return (f"im2rec: {os.path.basename(lst)}: listed {counts.listed} = packed {counts.packed}"
            f" + quarantined {counts.quarantined}" + (f" ({reasons})" if reasons else "")
            + f"; wrote {os.path.basename(out['rec'])}, {os.path.basename(out['idx'])}, "
            f"{os.path.basename(out['quarantine'])} in {seconds:.1f} s "
            f"({counts.listed / max(seconds, 1e-9):.0f} img/s)")


def find_lists(prefix: str) -> tuple[str, list[str]]:
    """im2rec's rule: every ``*.lst`` in the working dir whose path starts with PREFIX
    (all of them if PREFIX is a directory); sorted here, so runs are reproducible."""
    working_dir = prefix if os.path.isdir(prefix) else os.path.dirname(prefix)
    try:
        names = os.listdir(working_dir)
    except OSError:
        return working_dir, []
    files = [os.path.join(working_dir, n) for n in names]
    return working_dir, sorted(f for f in files if os.path.isfile(f)
                               and f.startswith(prefix) and f.endswith(".lst"))


def make_records(args: argparse.Namespace) -> int:
    from recforge.imaging import PackOptions

    working_dir, lists = find_lists(args.prefix)
    if not lists:
        print(f"recforge im2rec: error: no list file {args.prefix}*.lst in {working_dir}; "
              "create one with --list, or fix PREFIX", file=sys.stderr)
        return EXIT_USAGE
    if not os.path.isdir(args.root):
        print(f"recforge im2rec: error: root {args.root!r} is not a directory; pass the "
              "folder that the .lst paths are relative to", file=sys.stderr)
        return EXIT_USAGE
    opts = PackOptions(resize=args.resize, upscale=args.upscale, quality=args.quality,
                       encoding=args.encoding, color=args.color,
                       interpolation=args.interpolation, max_pixels=args.max_pixels,
                       center_crop=args.center_crop, reduced_decode=args.reduced_decode,
                       rounding="floor")
    cfg = Config(args.root, opts, args.pass_through, args.verify, args.pack_label)
    workers = args.num_thread or default_workers()
    status = EXIT_OK
    for lst in lists:
        print("Creating .rec file from", lst, "in", working_dir, flush=True)
        started = time.monotonic()
        try:
            counts = pack_list(lst, working_dir, cfg, workers)
        except (PackFailed, OSError) as exc:
            print(f"recforge im2rec: error: packing {lst} failed: {exc}", file=sys.stderr)
            return EXIT_FAILED
        print(_summary(lst, working_dir, counts, time.monotonic() - started), flush=True)
        if counts.quarantined:
            status = EXIT_QUARANTINED
    return status


# ---------------------------------------------------------------- entry point


def main(argv: list[str]) -> int:
    """``recforge im2rec ARGS``; returns the exit status (``EXIT_*``)."""
    parser = make_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2)
        return int(exc.code or 0)
    try:
        _check_args(parser, args)
    except SystemExit as exc:
        return int(exc.code or 0)
    args.prefix = os.path.abspath(args.prefix)
    args.root = os.path.abspath(args.root)

    def _term(signum, frame):
        raise _Terminated()

    old = None
    try:
        old = signal.signal(signal.SIGTERM, _term)
    except ValueError:  # not the main thread: leave signals alone
        pass
    try:
        return make_list(args) if args.list else make_records(args)
    except KeyboardInterrupt:
        print("recforge im2rec: interrupted; no partial output was left", file=sys.stderr)
        return EXIT_INTERRUPTED
    except _Terminated:
        print("recforge im2rec: terminated; no partial output was left", file=sys.stderr)
        return 128 + signal.SIGTERM
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
