"""``recforge im2rec`` against MXNet 1.9.1's own ``tools/im2rec.py`` (run as a subprocess
from the installed ``mxnet`` package), plus the corpus of broken and unusual files."""

from __future__ import annotations

import csv
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from recforge import im2rec, quarantine
from recforge.format import recordio
from tests.common import image_corpus as ic

# MXNet's own tools/im2rec.py, run by the MXNet environment's interpreter
MX_PYTHON = os.environ["RECFORGE_MXNET_PYTHON"]
MX_IM2REC = subprocess.run(
    [MX_PYTHON, "-c", "import importlib.util, os; print(os.path.join(importlib.util.find_spec("
     "'mxnet').submodule_search_locations[0], 'tools', 'im2rec.py'))"],
    capture_output=True, text=True, check=True).stdout.strip()
INCLUDE = str(Path(__file__).resolve().parents[2] / "include")


def run_mxnet(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([MX_PYTHON, MX_IM2REC, *args], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc


def run_ours(*args: str) -> int:
    return im2rec.main([str(a) for a in args])


def records(prefix: Path) -> list[tuple[recordio.IRHeader, bytes]]:
    return [recordio.unpack_image_record(p) for _, p in recordio.iter_records(f"{prefix}.rec")]


def image_of(payload: bytes) -> np.ndarray:
    return cv2.imdecode(np.frombuffer(payload, np.uint8), cv2.IMREAD_UNCHANGED)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return 99.0 if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def files_in(d: Path) -> set[str]:
    return {p.name for p in d.iterdir()}


# ---------------------------------------------------------------- a clean dataset


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    """Images MXNet's im2rec can pack without crashing: two class folders, mixed kinds."""
    root = tmp_path_factory.mktemp("clean") / "images"
    files = {
        "cat/a.jpg": ic.jpeg(ic.photo(96, 128, 1)),
        "cat/b big.jpg": ic.jpeg(ic.photo(480, 640, 2), quality=92),  # reduced decode
        "cat/c.png": ic.png(ic.photo(70, 50, 3)),
        "cat/d_gray.jpg": ic.jpeg(cv2.cvtColor(ic.photo(200, 300, 4), cv2.COLOR_BGR2GRAY)),
        "cat/e_progressive.jpg": ic.jpeg(ic.photo(256, 400, 5), progressive=True),
        "dog/f_cmyk.jpg": ic.cmyk_jpeg(ic.photo(160, 96, 6)),
        "dog/g_exif6.jpg": ic.exif_jpeg(ic.photo(256, 384, 7), 6),
        "dog/h_alpha.png": ic.rgba_png(ic.photo(64, 80, 8)),
        "dog/i_16bit.png": ic.png16(ic.photo(48, 64, 9)),
        "dog/j_magic.jpg": ic.jpeg_with_magic(ic.photo(40, 40, 10)),
        "dog/k_small.jpg": ic.jpeg(ic.photo(30, 50, 11)),  # enlarged by --resize 64
        "dog/l café 日本.jpg": ic.jpeg(ic.photo(300, 200, 12)),
        "dog/sub/m.jpg": ic.jpeg(ic.photo(1024, 768, 13)),  # --recursive: its own label
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "root_file.jpg").write_bytes(ic.jpeg(ic.photo(64, 64, 14)))
    (root / "notes.txt").write_text("not an image")
    return root


@pytest.fixture
def work(tmp_path, clean) -> Path:
    """Two side-by-side output folders with the same .lst (multi-label, unsorted keys)."""
    lines = []
    for i, rel in enumerate(sorted(p.relative_to(clean).as_posix() for p in clean.rglob("*")
                                   if p.is_file() and p.suffix != ".txt")):
        key = 100 + (i * 7) % 23
        lines.append(f"{key}\t{i % 3:f}\t{i * 0.5:f}\t{rel}\n")
    for d in ("mx", "rf"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "data.lst").write_text("".join(lines), encoding="utf-8")
    return tmp_path


class TestListMode:
    @pytest.mark.mxnet
    def test_recursive_chunks_and_ratios_match_mxnet(self, tmp_path, clean):
        args = ["--list", "--recursive", "--chunks", "2", "--train-ratio", "0.6",
                "--test-ratio", "0.2"]
        (tmp_path / "mx").mkdir()
        (tmp_path / "rf").mkdir()
        mx = run_mxnet(str(tmp_path / "mx" / "data"), str(clean), *args)
        assert run_ours(tmp_path / "rf" / "data", clean, *args) == 0
        names = files_in(tmp_path / "mx")
        assert names == files_in(tmp_path / "rf") and len(names) == 6
        for name in names:
            assert (tmp_path / "rf" / name).read_bytes() == (tmp_path / "mx" / name).read_bytes()
        assert "dog/sub 3" in mx.stdout  # every folder with files is a class

    @pytest.mark.mxnet
    def test_flat_no_shuffle_matches_mxnet(self, tmp_path, clean):
        run_mxnet(str(tmp_path / "mx"), str(clean), "--list", "--no-shuffle", "--exts", ".jpg")
        assert run_ours(tmp_path / "rf", clean, "--list", "--no-shuffle", "--exts", ".jpg") == 0
        assert (tmp_path / "rf.lst").read_bytes() == (tmp_path / "mx.lst").read_bytes()
        assert (tmp_path / "rf.lst").read_text() == "0\t0.000000\troot_file.jpg\n"

    def test_missing_root(self, tmp_path):
        assert run_ours(tmp_path / "x", tmp_path / "nope", "--list") == im2rec.EXIT_USAGE
        assert not (tmp_path / "x.lst").exists()


@pytest.mark.mxnet  # MXNet's tools/im2rec.py in the MXNet environment
class TestMatchesMxnet:
    def test_pass_through_is_byte_identical(self, work, clean):
        run_mxnet(str(work / "mx" / "data"), str(clean), "--pass-through", "--pack-label")
        assert run_ours(work / "rf" / "data", clean, "--pass-through", "--pack-label") == 0
        for ext in (".rec", ".idx"):
            assert (work / "rf" / f"data{ext}").read_bytes() == \
                (work / "mx" / f"data{ext}").read_bytes()
        # the magic number inside j_magic.jpg really exercised dmlc's record splitting
        rec = (work / "rf" / "data.rec").read_bytes()
        assert rec.count(recordio._MAGIC_BYTES) > len(records(work / "rf" / "data"))
        assert records(work / "rf" / "data")[0][0].flag == 2  # --pack-label: 2 floats

    @pytest.mark.parametrize("opts", [(), ("--color", "0", "--encoding", ".png")],
                             ids=["jpg", "gray-png"])
    def test_reencode_without_resize_is_byte_identical(self, work, clean, opts):
        run_mxnet(str(work / "mx" / "data"), str(clean), *opts)
        assert run_ours(work / "rf" / "data", clean, *opts) == 0
        for ext in (".rec", ".idx"):
            assert (work / "rf" / f"data{ext}").read_bytes() == \
                (work / "mx" / f"data{ext}").read_bytes()

    @pytest.mark.parametrize("crop", [False, True], ids=["resize", "resize+center-crop"])
    def test_resize_same_records_sizes_and_equivalent_pixels(self, work, clean, crop):
        opts = ["--resize", "64", "--quality", "95"] + (["--center-crop"] if crop else [])
        run_mxnet(str(work / "mx" / "data"), str(clean), *opts)
        assert run_ours(work / "rf" / "data", clean, *opts, "--num-thread", "2") == 0
        mx, rf = records(work / "mx" / "data"), records(work / "rf" / "data")
        assert [h for h, _ in rf] == [h for h, _ in mx]  # keys, labels, order
        assert (work / "rf" / "data.idx").read_text().split()[::2] == \
            (work / "mx" / "data.idx").read_text().split()[::2]
        scores = []
        for (_, a), (_, b) in zip(rf, mx, strict=True):
            a, b = image_of(a), image_of(b)
            assert a.shape == b.shape
            scores.append(psnr(a, b))
        assert np.mean(scores) > 32 and min(scores) > 24, scores
        # im2rec's exact pixels on request: full decode + bilinear
        assert run_ours(work / "rf" / "data", clean, *opts, "--interpolation", "linear",
                        "--no-reduced-decode") == 0
        assert (work / "rf" / "data.rec").read_bytes() == (work / "mx" / "data.rec").read_bytes()


# ---------------------------------------------------------------- the broken corpus

GOOD = {
    "plain.jpg": lambda: ic.jpeg(ic.photo(96, 128)),
    "gray.jpg": lambda: ic.jpeg(cv2.cvtColor(ic.photo(), cv2.COLOR_BGR2GRAY)),
    "alpha.png": lambda: ic.rgba_png(ic.photo()),
    "gray16.png": lambda: ic.png16(ic.photo(), gray=True),
    "rgb16.png": lambda: ic.png16(ic.photo()),
    "cmyk.jpg": lambda: ic.cmyk_jpeg(ic.photo()),
    "exif_rot6.jpg": lambda: ic.exif_jpeg(ic.photo(64, 96), 6),
    "progressive.jpg": lambda: ic.jpeg(ic.photo(), progressive=True),
    "palette.png": lambda: ic.palette_png(ic.photo()),
    "trailing_junk.jpg": lambda: ic.jpeg(ic.photo()) + b"vendor trailer" * 8,
    "naïve café 日本.jpg": lambda: ic.jpeg(ic.photo(80, 80)),
    "sub dir/with space.png": lambda: ic.png(ic.photo(50, 90)),
    "big.jpg": lambda: ic.jpeg(ic.photo(480, 640)),
}
BAD = {
    "not_an_image.jpg": lambda: b"GIF? no. just text pretending to be a picture\n" * 30,
    "truncated.jpg": lambda: ic.truncated(ic.jpeg(ic.photo(200, 300))),
    "truncated_progressive.jpg": lambda: ic.truncated(ic.jpeg(ic.photo(), progressive=True)),
    "corrupt.jpg": lambda: ic.corrupt_jpeg(ic.jpeg(ic.photo(200, 300))),
    "truncated.png": lambda: ic.truncated(ic.png(ic.photo())),
    "crc.png": lambda: ic.crc_broken_png(ic.png(ic.photo())),
    "empty.jpg": lambda: b"",
    "bomb.png": lambda: ic.png_header_only(30000, 30000),
    "bomb.jpg": lambda: ic.jpeg_claiming(60000, 60000),
}
# (line, key, path, reason, detail pattern) — the exact report, in .lst order
EXPECTED_QUARANTINE = [
    (14, 13, "missing.jpg", "missing", r"^no file at .*/root/missing\.jpg$"),
    (15, 14, "adir.jpg", "not_regular_file", r"/root/adir\.jpg is a directory, not a regular"),
    (16, 15, "not_an_image.jpg", "undecodable", r"^no known image signature"),
    (17, 16, "truncated.jpg", "truncated", r"^JPEG data ends before its end-of-image"),
    (18, 17, "truncated_progressive.jpg", "truncated", r"end-of-image marker"),
    (19, 18, "corrupt.jpg", "corrupt", r"^libjpeg: Corrupt JPEG data: premature end of data"),
    (20, 19, "truncated.png", "truncated", r"^PNG data ends before its IEND"),
    (21, 20, "crc.png", "corrupt", r"^libpng: IDAT: "),
    (22, 21, "empty.jpg", "zero_bytes", r"^file has 0 bytes$"),
    (23, 22, "bomb.png", "too_many_pixels", r"^30000x30000 = 900000000 pixels > max_pix"),
    (24, 23, "bomb.jpg", "too_many_pixels", r"^60000x60000 = 3600000000 pixels"),
    (25, 24, "../outside.jpg", "outside_root", r"'\.\.' escapes ROOT"),
    (26, 25, "ABSOLUTE", "outside_root", r"absolute path"),
    (27, "", "plain.jpg", "bad_lst_line", r"invalid literal for int\(\) with base 10: 'x'"),
    (28, "", "plain.jpg", "bad_lst_line", r"^2 tab-separated field\(s\)"),
    (29, 1, "gray.jpg", "duplicate_key", r"^index 1 was already used"),
    (31, 27, "sub dir/../../outside.jpg", "outside_root", r"escapes ROOT"),
]


@pytest.fixture
def corpus(tmp_path) -> Path:
    root = tmp_path / "root"
    for rel, make in {**GOOD, **BAD}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(make())
    (root / "adir.jpg").mkdir()
    (tmp_path / "outside.jpg").write_bytes(ic.jpeg(ic.photo()))  # exists, but not in root
    lines = [f"{i}\t{i % 2:f}\t{rel}" for i, rel in enumerate(GOOD)]
    lines += ["13\t0.000000\tmissing.jpg", "14\t1.000000\tadir.jpg"]
    lines += [f"{15 + i}\t{i % 2:f}\t{rel}" for i, rel in enumerate(BAD)]
    lines += ["24\t0.000000\t../outside.jpg", f"25\t0.000000\t{tmp_path / 'outside.jpg'}",
              "x\t0.000000\tplain.jpg", "26\tplain.jpg", "1\t1.000000\tgray.jpg", "   ",
              "27\t0.000000\tsub dir/../../outside.jpg"]
    out = tmp_path / "out"
    out.mkdir()
    (out / "corpus.lst").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tmp_path


def read_quarantine(path: Path) -> list[dict]:
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


class TestCorpus:
    def test_exact_quarantine_report_and_exit_status(self, corpus, capsys):
        out = corpus / "out"
        status = run_ours(out / "corpus", corpus / "root", "--resize", "64", "--num-thread", "2")
        assert status == im2rec.EXIT_QUARANTINED
        rows = read_quarantine(out / "corpus.quarantine.tsv")
        assert len(rows) == len(EXPECTED_QUARANTINE)
        for row, (line, key, path, reason, detail) in zip(rows, EXPECTED_QUARANTINE, strict=True):
            path = str(corpus / "outside.jpg") if path == "ABSOLUTE" else path
            assert (row["line"], row["key"], row["path"], row["reason"]) == \
                (str(line), str(key), path, reason)
            assert re.search(detail, row["detail"]), (reason, row["detail"])
            assert row["fix"] == quarantine.FIXES[reason]
        summary = capsys.readouterr().out.strip().splitlines()[-1]
        assert summary.startswith(
            "im2rec: corpus.lst: listed 30 = packed 13 + quarantined 17 (bad_lst_line 2, "
            "corrupt 2, duplicate_key 1, missing 1, not_regular_file 1, outside_root 3, "
            "too_many_pixels 2, truncated 3, undecodable 1, zero_bytes 1); wrote corpus.rec, "
            "corpus.idx, corpus.quarantine.tsv in ")

    def test_unusual_images_packed_on_purpose(self, corpus):
        out = corpus / "out"
        run_ours(out / "corpus", corpus / "root", "--resize", "64", "--num-thread", "1")
        recs = {h.id: image_of(img) for h, img in records(out / "corpus")}
        assert sorted(recs) == list(range(13))
        names = list(GOOD)
        shapes = {names[k]: v.shape for k, v in recs.items()}
        assert shapes["plain.jpg"] == (64, 85, 3)
        assert shapes["gray.jpg"] == (64, 85, 3)  # --color 1: three equal channels
        assert shapes["alpha.png"] == (64, 85, 3)  # alpha dropped, as im2rec does
        assert shapes["exif_rot6.jpg"] == (96, 64, 3)  # 64x96 stored, rotated upright
        assert shapes["big.jpg"] == (64, 85, 3)
        assert shapes["sub dir/with space.png"] == (64, 115, 3)
        gray16 = recs[names.index("gray16.png")]
        assert 10 < gray16.mean() < 245  # 16-bit scaled, not saturated

    def test_output_identical_whatever_the_worker_count(self, corpus):
        out = corpus / "out"
        seen = set()
        for n in ("1", "2", "3"):
            run_ours(out / "corpus", corpus / "root", "--resize", "64", "--num-thread", n)
            seen.add(tuple((out / f"corpus{e}").read_bytes()
                           for e in (".rec", ".idx", ".quarantine.tsv")))
        assert len(seen) == 1

    def test_pass_through_verifies_unless_told_not_to(self, corpus):
        out = corpus / "out"
        assert run_ours(out / "corpus", corpus / "root", "--pass-through") == 1
        reasons = {r["path"]: r["reason"] for r in read_quarantine(out / "corpus.quarantine.tsv")}
        assert reasons["corrupt.jpg"] == "corrupt" and reasons["empty.jpg"] == "zero_bytes"
        assert run_ours(out / "corpus", corpus / "root", "--pass-through", "--no-verify") == 1
        reasons = {r["path"]: r["reason"] for r in read_quarantine(out / "corpus.quarantine.tsv")}
        assert "corrupt.jpg" not in reasons and reasons["missing.jpg"] == "missing"


def test_parse_list_edge_lines(tmp_path):
    lst = tmp_path / "e.lst"
    lst.write_bytes(b"0\t1\ta.jpg\r\n18446744073709551616\t0\tb.jpg\n-1\t0\tc.jpg\n"
                    b"2\t1e40\td.jpg\n3\t1\t 2 \t e f.jpg \n\n4\t0\t\xff.jpg\n"
                    b"5\tnan\tg.jpg\n6\t0\t-inf\th.jpg\n")
    items = list(im2rec.parse_list(str(lst)))
    assert [(i.line, i.key, i.reject[0] if i.reject else None) for i in items] == [
        (1, 0, None), (2, None, "bad_lst_line"), (3, None, "bad_lst_line"),
        (4, None, "bad_lst_line"), (5, 3, None), (7, 4, None), (8, None, "bad_lst_line"),
        (9, None, "bad_lst_line")]
    assert items[4].path == "e f.jpg" and items[4].labels == (1.0, 2.0)
    assert os.fsencode(items[5].path) == b"\xff.jpg"  # any file-name bytes survive
    assert "not finite" in items[6].reject[1] and "not finite" in items[7].reject[1]


class TestExitStatus:
    def test_clean_run_is_zero_with_an_empty_report(self, work, clean):
        assert run_ours(work / "rf" / "data", clean, "--resize", "32") == im2rec.EXIT_OK
        assert (work / "rf" / "data.quarantine.tsv").read_text() == \
            "\t".join(im2rec.QUARANTINE_COLUMNS) + "\n"

    def test_missing_list_is_an_error_not_success(self, tmp_path, capsys):
        assert run_ours(tmp_path / "nothing", tmp_path) == im2rec.EXIT_USAGE
        assert "no list file" in capsys.readouterr().err
        assert files_in(tmp_path) == set()

    def test_missing_root(self, work, tmp_path):
        assert run_ours(work / "rf" / "data", tmp_path / "nope") == im2rec.EXIT_USAGE
        assert files_in(work / "rf") == {"data.lst"}

    @pytest.mark.parametrize("args", [["--num-thread", "0"], ["--color", "2"],
                                      ["--quality", "101"], ["--interpolation", "bilinear"]])
    def test_bad_arguments(self, work, clean, args):
        assert run_ours(work / "rf" / "data", clean, *args) == im2rec.EXIT_USAGE

    def test_help_through_the_cli(self, capsys):
        from recforge import cli

        assert cli.main(["im2rec", "--help"]) == 0
        assert "--pass-through" in capsys.readouterr().out
        with pytest.raises(SystemExit):
            cli.main(["--help"])
        assert "im2rec" in capsys.readouterr().out


# ---------------------------------------------------------------- crash paths


def _default_interrupt() -> None:
    """In the child before it starts: SIGINT's default action, whatever this process had. A
    test run started in the background of a non-interactive shell ignores SIGINT, and an
    ignored signal stays ignored across exec: the child would never hear Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class TestNoPartialOutput:
    @pytest.fixture
    def previous(self, work) -> Path:
        """A complete earlier output that a failed run must leave untouched."""
        out = work / "rf"
        for ext in (".rec", ".idx", ".quarantine.tsv"):
            (out / f"data{ext}").write_text(f"previous{ext}")
        return out

    def assert_untouched(self, out: Path) -> None:
        assert files_in(out) == {"data.lst", "data.rec", "data.idx", "data.quarantine.tsv"}
        for ext in (".rec", ".idx", ".quarantine.tsv"):
            assert (out / f"data{ext}").read_text() == f"previous{ext}"

    def test_write_error(self, previous, clean, monkeypatch):
        real = recordio.RecordWriter.write_framed
        calls = []

        def disk_full(self, key, framed):
            calls.append(key)
            if len(calls) == 3:
                raise OSError(28, "No space left on device")
            return real(self, key, framed)

        monkeypatch.setattr(recordio.RecordWriter, "write_framed", disk_full)
        assert run_ours(previous / "data", clean, "--resize", "32",
                        "--num-thread", "2") == im2rec.EXIT_FAILED
        self.assert_untouched(previous)

    def test_worker_dies(self, previous, clean, monkeypatch, capsys):
        real = im2rec.encode_item

        def crash(cfg, item):
            if item.path.endswith("e_progressive.jpg"):
                os._exit(70)  # a decoder segfault looks like this to the pool
            return real(cfg, item)

        monkeypatch.setattr(im2rec, "encode_item", crash)
        assert run_ours(previous / "data", clean, "--num-thread", "2") == im2rec.EXIT_FAILED
        assert "worker process died" in capsys.readouterr().err
        self.assert_untouched(previous)

    @pytest.mark.parametrize("sig,workers,status", [(signal.SIGTERM, "2", 143),
                                                    (signal.SIGINT, "1", 130)])
    def test_signal_while_busy_on_a_long_list(self, previous, clean, sig, workers, status):
        """A long tail of large images keeps the run busy mid-way, with records already
        written, when the signal arrives. (A FIFO no longer blocks it: it is refused as
        ``not_regular_file`` without being opened for a blocking read.)"""
        big = clean / f"big-{sig}.png"  # not listed by --list, nor by `work`
        big.write_bytes(ic.png(np.random.default_rng(0).integers(0, 256, (1500, 1500, 3),
                                                                  dtype=np.uint8)))
        with open(previous / "data.lst", "a", encoding="utf-8") as f:
            f.writelines(f"{1000 + i}\t0.000000\t{big.name}\n" for i in range(2000))
        proc = subprocess.Popen(
            [sys.executable, "-m", "recforge.cli", "im2rec", str(previous / "data"), str(clean),
             "--resize", "32", "--num-thread", workers, "--no-reduced-decode"],
            env={**os.environ, "PYTHONPATH": INCLUDE}, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, preexec_fn=_default_interrupt)
        try:
            deadline = time.monotonic() + 60
            partial = previous / "data.rec.partial"
            while not (partial.exists() and partial.stat().st_size > 0):
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.05)
            time.sleep(0.3)
            assert proc.poll() is None, "finished before the signal"
            proc.send_signal(sig)
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            big.unlink()
        assert proc.returncode == status, err
        assert "no partial output was left" in err
        self.assert_untouched(previous)


# ---------------------------------------------------------------- the DAG's pack stage


def test_pack_items_uses_the_engine_over_s3(bucket, tmp_path):
    """The shard task's engine: same quarantine reasons, bounded prefetch, manifest."""
    from recforge import storage
    from recforge.imaging import PackOptions
    from recforge.stages.pack import pack_items

    objects = {"a/good.jpg": ic.jpeg(ic.photo(480, 640)), "a/corrupt.jpg":
               ic.corrupt_jpeg(ic.jpeg(ic.photo(200, 300))), "b/trunc.png":
               ic.truncated(ic.png(ic.photo()))}
    for key, data in objects.items():
        storage.put_bytes(f"s3://{bucket}/src/{key}", data)
    keys = [*objects, "b/gone.jpg"]
    rows = [{"source_key": k, "record_key": i, "label": float(i % 2), "name": k, "split":
             "train", "class_name": k[0], "etag": "x"} for i, k in enumerate(keys)]
    counts = pack_items(rows, f"s3://{bucket}/src", PackOptions(resize=64), tmp_path,
                        fetch_threads=2)
    assert counts == {"packed": 1, "quarantined": 3}
    refused = {e.source_key: e.reason for e in
               quarantine.loads((tmp_path / "quarantine.jsonl").read_bytes())}
    assert refused == {"a/corrupt.jpg": "corrupt", "b/trunc.png": "truncated",
                       "b/gone.jpg": "missing"}
    (row,) = storage.read_jsonl(str(tmp_path / "records.jsonl"))
    assert (row["height"], row["width"], row["channels"], row["key"]) == (64, 85, 3, 0)
    (header, img), = records(tmp_path / "part")
    assert header.id == 0 and image_of(img).shape == (64, 85, 3)
