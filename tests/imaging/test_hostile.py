"""Hostile input is refused by name: ``recforge im2rec`` never follows a symbolic link out of
ROOT, never reads a FIFO or a device (a FIFO named ``.jpg`` must not hang it), and every
refusal carries its true reason: a 100000 x 1 image names JPEG's 65,500-pixel limit, a 0 x 0
PNG is a zero-size image. (NaN/inf labels: ``test_im2rec.test_parse_list_edge_lines``.)"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from recforge import im2rec
from recforge.imaging import ImageRejected, PackOptions, process
from tests.common import image_corpus as ic


def pack(root: Path, lines: list[str], *args: str) -> dict[str, tuple[str, str]]:
    """Pack ``lines`` (``.lst`` paths, label 0) under ROOT in a subprocess (a hang fails
    it, not the whole run); returns path → (reason, detail) from the quarantine report."""
    lst = root.parent / "data.lst"
    lst.write_text("".join(f"{i}\t0\t{p}\n" for i, p in enumerate(lines)))
    proc = subprocess.run([sys.executable, "-m", "recforge.cli", "im2rec", str(lst), str(root),
                           "--num-thread", "1", *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode in (im2rec.EXIT_OK, im2rec.EXIT_QUARANTINED), proc.stderr
    with open(root.parent / "data.quarantine.tsv", encoding="utf-8", newline="") as f:
        rows = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        return {r["path"]: (r["reason"], r["detail"]) for r in rows}


@pytest.fixture
def root(tmp_path) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    (root / "ok.jpg").write_bytes(ic.jpeg(ic.photo(32, 32)))
    return root


def test_symlinks_out_of_root_are_refused_and_inside_are_followed(root, tmp_path):
    secret = tmp_path / "outside.jpg"
    secret.write_bytes(ic.jpeg(ic.photo(32, 32, seed=1)))
    (root / "escape.jpg").symlink_to(secret)
    (root / "sub").symlink_to(tmp_path)  # a linked folder that leads out
    (root / "inside.jpg").symlink_to(root / "ok.jpg")
    got = pack(root, ["ok.jpg", "escape.jpg", "sub/outside.jpg", "inside.jpg"])
    assert set(got) == {"escape.jpg", "sub/outside.jpg"}
    for reason, detail in got.values():
        assert reason == "outside_root" and "symbolic link" in detail and str(secret) in detail


def test_a_fifo_named_jpg_and_a_directory_are_skipped_without_hanging(root):
    os.mkfifo(root / "pipe.jpg")
    (root / "folder.jpg").mkdir()
    got = pack(root, ["pipe.jpg", "folder.jpg", "ok.jpg"])
    assert got == {"pipe.jpg": ("not_regular_file", f"{root}/pipe.jpg is a FIFO (named pipe), "
                                "not a regular file"),
                   "folder.jpg": ("not_regular_file", f"{root}/folder.jpg is a directory, "
                                  "not a regular file")}


def test_a_character_device_is_skipped():
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero here")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        lst = Path(tmp) / "dev.lst"
        lst.write_text("0\t0\tzero\n")
        proc = subprocess.run([sys.executable, "-m", "recforge.cli", "im2rec", str(lst), "/dev",
                               "--num-thread", "1"], capture_output=True, text=True, timeout=60)
        assert proc.returncode == im2rec.EXIT_QUARANTINED, proc.stderr
        report = (Path(tmp) / "dev.quarantine.tsv").read_text()
    assert "\tnot_regular_file\t/dev/zero is a character device" in report


def test_a_100000_by_1_image_names_jpegs_size_limit(root):
    wide = cv2.imencode(".png", np.full((1, 100_000, 3), 128, np.uint8))[1].tobytes()
    (root / "wide.png").write_bytes(wide)
    reason, detail = pack(root, ["wide.png"])["wide.png"]
    assert reason == "jpeg_size_limit" and "65,500" in detail and "100000x1" in detail
    assert pack(root, ["wide.png"], "--encoding", ".png") == {}  # PNG holds it
    with pytest.raises(ImageRejected, match="65,500") as refused:  # the pipeline's packer
        process(wide, PackOptions(resize=0))
    assert refused.value.reason == "jpeg_size_limit"
    # enlarged to a short side of 48 it would be 4.8 M x 48: refused before the resize
    with pytest.raises(ImageRejected) as refused:
        process(wide, PackOptions(resize=48, upscale=True, encoding=".png"))
    assert refused.value.reason == "too_many_pixels" and "4800000x48" in refused.value.detail


@pytest.mark.parametrize("w, h", [(0, 0), (0, 7), (7, 0)])
def test_a_zero_size_png_is_a_zero_size_image(root, w, h):
    (root / "zero.png").write_bytes(ic.png_header_only(w, h))
    reason, detail = pack(root, ["zero.png"])["zero.png"]
    assert (reason, detail) == ("zero_size", f"the PNG header says {w}x{h}: a zero-size image "
                                "has no pixels")
    assert pack(root, ["zero.png"], "--pass-through") == {"zero.png": (reason, detail)}
