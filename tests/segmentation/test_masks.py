"""Mask conversion: RGB colour masks, palette masks, id masks, failures and the CLI."""

from __future__ import annotations

import io
import json
import pickle

import cv2
import numpy as np
import pytest
from PIL import Image

from recforge import cli
from recforge.imaging import ImageRejected
from recforge.segmentation import masks
from recforge.segmentation.colormaps import load_colormap
from recforge.segmentation.masks import MaskConverter, MaskRejected, UnknownMaskValues
from tests.common.segdata import (
    CITYSCAPES_TRAIN,
    block_ids,
    cityscapes_color,
    expected_train_ids,
    png,
)


@pytest.fixture(scope="module")
def city():
    return MaskConverter.from_config("cityscapes")


@pytest.fixture(scope="module")
def city_ids():
    return block_ids(96, 64, [*range(34), 255], block=4, seed=1)  # 255 stands for plate


class TestRgb:
    def test_cityscapes_colour_masks_to_train_ids(self, city, city_ids):
        res = city.convert(png(cityscapes_color(city_ids)), "aachen_000000_gtFine_color.png")
        assert res.mask.dtype == np.uint8 and res.mask.shape == city_ids.shape
        np.testing.assert_array_equal(res.mask, expected_train_ids(city_ids))
        assert res.unknown_pixels == 0

    def test_target_id(self, city_ids):
        conv = MaskConverter.from_config("cityscapes", target="id")
        got = conv.convert(png(cityscapes_color(city_ids))).mask
        want = city_ids.copy()
        want[np.isin(city_ids, [1, 2, 3, 4])] = 0  # black → unlabeled
        want[city_ids == 18] = 17                  # grey → pole
        want[city_ids == 255] = 26                 # dark blue → car
        np.testing.assert_array_equal(got, want)

    def test_override_changes_the_result(self, city_ids):
        conv = MaskConverter.from_config("cityscapes", resolve=["153,153,153=polegroup"])
        got = conv.convert(png(cityscapes_color(city_ids))).mask
        assert set(got[city_ids == 18].tolist()) == {255}
        assert set(got[city_ids == 17].tolist()) == {255}  # same colour: both ignored now

    def test_rgba_and_array_input(self, city, city_ids):
        rgb = cityscapes_color(city_ids)
        rgba = np.dstack([rgb, np.full(rgb.shape[:2], 255, np.uint8)])
        np.testing.assert_array_equal(city.convert(png(rgba)).mask, expected_train_ids(city_ids))
        np.testing.assert_array_equal(city.convert_rgb(rgb).mask, expected_train_ids(city_ids))

    def test_bgr_keys(self):
        bgr = np.array([[[3, 2, 1], [0, 0, 255]]], np.uint8)
        assert masks.bgr_keys(bgr).tolist() == [[0x010203, 0xFF0000]]


class TestUnknown:
    def test_error_names_file_colour_count_and_location(self, city, city_ids):
        rgb = cityscapes_color(city_ids)
        rgb[10:12, 20:23] = (1, 2, 3)   # 6 px, first at x=20, y=10
        rgb[40, 5] = (9, 9, 9)
        with pytest.raises(UnknownMaskValues) as exc:
            city.convert(png(rgb), "city/a_color.png")
        msg = str(exc.value)
        assert "'city/a_color.png'" in msg and "6 pixels have colour (1, 2, 3)" in msg
        assert "x=20, y=10" in msg and "colour (9, 9, 9) × 1 px (first at x=5, y=40)" in msg
        assert "7 unknown pixels" in msg and "on_unknown: ignore" in msg
        assert exc.value.total == 7

    def test_ignore_maps_to_255_and_counts(self, city_ids):
        conv = MaskConverter.from_config("cityscapes", on_unknown="ignore")
        rgb = cityscapes_color(city_ids)
        rgb[0:2, 0:2] = (1, 2, 3)
        res = conv.convert(png(rgb))
        assert res.unknown_pixels == 4 and res.unknown[0].what == "colour (1, 2, 3)"
        assert (res.mask[0:2, 0:2] == 255).all()
        want = expected_train_ids(city_ids)
        want[0:2, 0:2] = 255
        np.testing.assert_array_equal(res.mask, want)

    def test_unknown_id(self, city):
        ids = np.zeros((4, 4), np.uint8)
        ids[2, 3] = 77
        with pytest.raises(UnknownMaskValues, match=r"1 pixels have id 77.*x=3, y=2"):
            city.convert(png(ids), "l.png")


class TestIdAndPalette:
    def test_label_ids_to_train_ids(self, city):
        ids = block_ids(64, 32, range(34), block=4, seed=2)
        want = np.array([CITYSCAPES_TRAIN.get(i, 255) for i in range(256)], np.uint8)[ids]
        got = city.convert(png(ids), "x_gtFine_labelIds.png").mask
        np.testing.assert_array_equal(got, want)  # ids tell polegroup (255) from pole (5)

    def test_voc_palette_masks_are_read_as_indices(self):
        cm = load_colormap("voc")
        palette = np.zeros((256, 3), np.uint8)
        for lab in cm.labels:
            palette[lab.id] = lab.color
        idx = block_ids(64, 48, [*range(21), 255], block=4, seed=3)
        data = png(idx, palette)
        assert Image.open(io.BytesIO(data)).mode == "P"
        got = MaskConverter(cm).convert(data, "2007_000032.png").mask
        np.testing.assert_array_equal(got, idx)
        # the pitfall recforge avoids: OpenCV turns indices 1/15/255 into luminance
        gray = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_GRAYSCALE)
        assert not np.array_equal(gray, idx)
        # an RGB rendering of the same mask maps back through the VOC colours
        np.testing.assert_array_equal(MaskConverter(cm).convert(png(palette[idx])).mask, idx)

    def test_palette_with_colour_map_looks_up_palette_colours(self, city, city_ids):
        # a Cityscapes colour mask saved as P with an arbitrary palette order
        rgb = cityscapes_color(city_ids)
        colours, idx = np.unique(rgb.reshape(-1, 3), axis=0, return_inverse=True)
        order = np.random.default_rng(0).permutation(len(colours))
        palette = np.zeros((256, 3), np.uint8)
        palette[order] = colours
        data = png(order[idx].reshape(city_ids.shape).astype(np.uint8), palette)
        np.testing.assert_array_equal(city.convert(data).mask, expected_train_ids(city_ids))

    def test_unknown_palette_entry(self, city):
        palette = np.zeros((256, 3), np.uint8)
        palette[1] = (1, 1, 1)
        idx = np.zeros((3, 3), np.uint8)
        idx[1, 1] = 1
        with pytest.raises(UnknownMaskValues, match=r"palette index 1 = colour \(1, 1, 1\)"):
            city.convert(png(idx, palette), "p.png")


class TestRefusals:
    def test_jpeg_mask(self, city):
        ok, buf = cv2.imencode(".jpg", np.zeros((8, 8, 3), np.uint8))
        with pytest.raises(MaskRejected) as exc:
            city.convert(buf.tobytes(), "m.jpg")
        assert exc.value.reason == "mask_lossy" and isinstance(exc.value, ImageRejected)

    @pytest.mark.parametrize("data, reason", [(b"", "zero_bytes"),
                                              (b"not an image", "undecodable")])
    def test_bad_bytes(self, city, data, reason):
        with pytest.raises(MaskRejected) as exc:
            city.convert(data, "m.png")
        assert exc.value.reason == reason

    def test_16_bit_ids(self, city):
        arr = np.full((4, 4), 300, np.uint16)
        buf = io.BytesIO()
        Image.fromarray(arr).save(buf, "PNG")
        with pytest.raises(MaskRejected, match="values up to 300"):
            city.convert(buf.getvalue(), "m.png")

    def test_size_mismatch(self):
        masks.check_same_size((64, 32), (64, 32))
        with pytest.raises(MaskRejected, match=r"image is 64x32 but its mask is 32x16") as e:
            masks.check_same_size((64, 32), (32, 16), "a.png")
        assert e.value.reason == "mask_size_mismatch"

    def test_converted_mask_required(self):
        with pytest.raises(MaskRejected, match="convert it first"):
            masks.decode_class_mask(png(np.zeros((2, 2, 3), np.uint8)))


def test_converter_pickles_without_tables(city, city_ids):
    city.convert(png(cityscapes_color(city_ids)))  # builds the 16 MB table
    assert len(pickle.dumps(city)) < 100_000


@pytest.fixture
def city_tree(tmp_path, city_ids):
    src = tmp_path / "gtFine"
    for rel, seed in (("train/aachen/a_gtFine_color.png", 0),
                      ("val/bonn/b_gtFine_color.png", 1)):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        ids = block_ids(48, 32, [*range(34), 255], block=4, seed=seed)
        (src / rel).write_bytes(png(cityscapes_color(ids)))
        (src / rel.replace("_color", "_labelIds")).write_bytes(png(ids))
    return src


def test_convert_tree(tmp_path, city, city_tree):
    dst = tmp_path / "out"
    rep = masks.convert_tree(city_tree, dst, city, pattern="*_color.png")
    assert rep.files == 2 and rep.pixels == 2 * 48 * 32
    for rel in ("train/aachen/a_gtFine_color.png", "val/bonn/b_gtFine_color.png"):
        out = Image.open(dst / rel)
        assert out.mode == "L"
        ids = np.asarray(Image.open(city_tree / rel.replace("_color", "_labelIds")))
        np.testing.assert_array_equal(np.asarray(out), expected_train_ids(ids))
    assert sum(rep.to_dict(city)["pixels_by_value"].values()) == rep.pixels
    with pytest.raises(ValueError, match="inside it"):
        masks.convert_tree(city_tree, city_tree / "converted", city)


def test_cli_convert_and_failure(tmp_path, city_tree, capsys):
    dst = tmp_path / "cli"
    rc = cli.main(["masks", "convert", "--colormap", "cityscapes", "--pattern", "*_color.png",
                   "--report", str(tmp_path / "r.json"), str(city_tree), str(dst)])
    assert rc == 0
    assert "converted 2 masks" in capsys.readouterr().out
    assert json.loads((tmp_path / "r.json").read_text())["classes"]["num_classes"] == 19
    bad = city_tree / "train/aachen/a_gtFine_color.png"
    arr = np.asarray(Image.open(bad)).copy()
    arr[3, 4] = (5, 6, 7)
    bad.write_bytes(png(arr))
    rc = cli.main(["masks", "convert", "--colormap", "cityscapes", "--pattern", "*_color.png",
                   str(city_tree), str(tmp_path / "cli2")])
    err = capsys.readouterr().err
    assert rc == 2 and "a_gtFine_color.png" in err and "colour (5, 6, 7)" in err
    assert "x=4, y=3" in err
    rc = cli.main(["masks", "convert", "--colormap", "cityscapes", "--on-unknown", "ignore",
                   "--pattern", "*_color.png", str(city_tree), str(tmp_path / "cli3")])
    assert rc == 0 and "1 unknown pixels mapped to 255" in capsys.readouterr().out
    assert cli.main(["masks", "colormap", "--colormap", "cityscapes"]) == 0
    assert "lowest_id picks 'pole'" in capsys.readouterr().out


def test_convert_rows_quarantines_both_keys(tmp_path, city, city_ids):
    src = tmp_path / "src"
    (src / "gt").mkdir(parents=True)
    (src / "gt/a.png").write_bytes(png(cityscapes_color(city_ids)))
    (src / "gt/b.png").write_bytes(b"garbage")
    rows = [{"record_key": 0, "source_key": "img/a.png", "mask_key": "gt/a.png"},
            {"record_key": 1, "source_key": "img/b.png", "mask_key": "gt/b.png"}]
    out = tmp_path / "staging" / "masks" / "train-00000"
    result = masks.convert_rows(rows, str(src), str(out), city)
    assert result.report["converted"] == 1 and result.report["quarantined"] == 2
    assert [r["mask_uri"] for r in result.converted] == [str(out / "gt/a.png")]
    np.testing.assert_array_equal(np.asarray(Image.open(out / "gt/a.png")),
                                  expected_train_ids(city_ids))
    assert {e.source_key for e in result.refused} == {"img/b.png", "gt/b.png"}
    assert {e.reason for e in result.refused} == {"undecodable"}
