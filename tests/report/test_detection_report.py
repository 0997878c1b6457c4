"""The report of a detection dataset: per-class samples with their boxes drawn from the
``.rec``, object charts, refused objects with their box on the source image, the summary's
object counts — on a small detection output written here (real ``.rec``/``.idx``)."""

from __future__ import annotations

import base64
import html
import io
import json
import re
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from recforge.format import detection_label, recordio
from recforge.report import build_report, render_record
from recforge.report.charts import histogram
from recforge.report.images import REFUSED_RGB, box_colors
from recforge.report.sections import sections_for
from recforge.report.sections.box_samples import BOX_SAMPLES_PER_CLASS
from tests.report.test_report import Page

W, H = 160, 120  # every stored image
GREY = 128
CLASSES = ["cat", "dog", "person"]
COLORS = box_colors(len(CLASSES))
# per record: split and objects (class id, xmin, ymin, xmax, ymax, difficult), normalised
RECORDS = [
    ("train", [(0, 0.10, 0.10, 0.60, 0.70, 0)]),
    ("train", [(1, 0.20, 0.20, 0.80, 0.90, 0), (2, 0.05, 0.30, 0.40, 0.95, 1)]),
    ("train", []),  # a negative
    ("train", [(0, 0.10, 0.10, 0.60, 0.70, 0), (1, 0.65, 0.05, 0.95, 0.45, 0)]),
    ("train", [(0, 0.10, 0.10, 0.60, 0.70, 0)]),
    ("train", [(0, 0.10, 0.10, 0.60, 0.70, 0)]),
    ("train", [(0, 0.10, 0.10, 0.60, 0.70, 0)]),
    ("val", [(0, 0.10, 0.10, 0.60, 0.70, 0)]),
]
PART = {"source_key": "JPEGImages/000001.jpg", "stage": "pack", "reason": "box_outside_image",
        "detail": "object 3: box (100, 20, 190, 80) reaches x 190 > width 160",
        "fix": "the box reaches outside the image; fix it in the labelling tool",
        "part": "object 3", "box": [100, 20, 190, 80]}
WHOLE = {"source_key": "JPEGImages/broken.jpg", "stage": "pack", "reason": "undecodable",
         "detail": "not an image", "fix": "re-export the image"}


def _jpeg(quality: int = 95) -> bytes:
    return cv2.imencode(".jpg", np.full((H, W, 3), GREY, np.uint8),
                        [cv2.IMWRITE_JPEG_QUALITY, quality])[1].tobytes()


def write_detection_output(out: Path, records=RECORDS, quarantine=(PART, WHOLE),
                           summary_extra: dict | None = None) -> list[dict]:
    """A run's out/ of a detection dataset: ``<split>.rec/.idx``, records.jsonl,
    classes.json, summary.json, quarantine.jsonl; returns the records.jsonl rows."""
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    by_split: dict[str, list] = {}
    for i, (split, objects) in enumerate(records):
        by_split.setdefault(split, []).append((i, objects))
    for split, items in by_split.items():
        with recordio.RecordWriter(out / f"{split}.rec", out / f"{split}.idx") as w:
            for i, objects in items:
                label = detection_label.encode(W, H, objects)
                payload = recordio.pack_image_record(label, i, _jpeg())
                offset = w.write(i, payload)
                name = f"{i:06d}"
                rows.append({
                    "key": i, "split": split, "offset": offset, "length": len(payload),
                    "height": H, "width": W, "channels": 3, "label": label,
                    "class_name": None, "name": f"JPEGImages/{name}.jpg",
                    "source_key": f"JPEGImages/{name}.jpg", "source_etag": f"e{i}",
                    "source_sha256": f"{i:064x}", "decode_status": "ok", "phash": None,
                    "annotation_key": f"Annotations/{name}.xml", "num_objects": len(objects)})
    (out / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (out / "classes.json").write_text(json.dumps({
        "num_classes": len(CLASSES), "classes": CLASSES,
        "ids": {c: i for i, c in enumerate(CLASSES)}, "task": "detection"}))
    parts = [e for e in quarantine if e.get("part")]
    (out / "summary.json").write_text(json.dumps({
        "listed": len(records) + 1, "packed": len(records), "quarantined": 1,
        **({"objects_quarantined": len(parts), "objects_quarantined_by_reason":
            {"box_outside_image": len(parts)}} if parts else {}), **(summary_extra or {})}))
    (out / "quarantine.jsonl").write_text("".join(json.dumps(e) + "\n" for e in quarantine))
    return rows


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The output, its source (the refused object's image, white, 160 x 120) and the page."""
    root = tmp_path_factory.mktemp("det")
    rows = write_detection_output(root / "out")
    src = root / "src" / "JPEGImages"
    src.mkdir(parents=True)
    (src / "000001.jpg").write_bytes(cv2.imencode(".jpg", np.full((H, W, 3), 255, np.uint8))[1]
                                     .tobytes())
    about = {"dataset": "voc", "task": "detection", "version": "v1",
             "uri": str(root / "pub" / "voc" / "v1"),
             "spec": {"source": {"uri": str(root / "src"), "layout": "voc"},
                      "detection": {"box_frame": "stored"}}}
    path = build_report(str(root / "out"), root / "report.html", about=about)
    text = path.read_text(encoding="utf-8")
    return root, rows, text, Page(text)


def _section(text: str, sid: str) -> str:
    return text.split(f'<section id="{sid}">', 1)[1].split("</section>", 1)[0]


def _image(src: str) -> np.ndarray:
    """An embedded data-URI image as an RGB array."""
    assert src.startswith("data:image/"), src[:40]
    with Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1]))) as im:
        return np.asarray(im.convert("RGB")).astype(int)


def _samples(text: str) -> list[tuple[str, np.ndarray]]:
    """(hover text, image) of every detection sample figure."""
    found = re.findall(r'<figure class="box" title="([^"]*)"><div class="img"><span '
                       r'class="at"><img src="([^"]+)"', _section(text, "samples"))
    return [(html.unescape(t), _image(src)) for t, src in found]


def _near(pixel, rgb, tol: int = 70) -> bool:
    return int(np.abs(np.asarray(pixel) - np.asarray(rgb, int)).max()) <= tol


def _edge_pixels(img: np.ndarray, box, step: int = 1) -> list:
    """The pixels along the bottom and right edges of a normalised box (clear of its tag)."""
    h, w = img.shape[:2]
    x0, y0, x1, y1 = (round(box[0] * w), round(box[1] * h), round(box[2] * w),
                      round(box[3] * h))
    y1, x1 = min(y1, h - 1), min(x1, w - 1)
    bottom = [img[y1, x] for x in range(x0 + 6, x1 - 6, step)]
    right = [img[y, x1] for y in range(y0 + 12, y1 - 6, step)]
    return bottom + right


def test_a_detection_report_has_its_sections_and_object_counts(built):
    _, _, text, page = built
    assert {s.sid for s in sections_for("detection")} <= page.ids and "masks" not in page.ids
    assert page.summary["task"] == "detection"
    # 9 objects in 7 images, one difficult; one negative; the refused object with its reason
    assert page.summary["objects"] == "9 in 7 images, 1 of them difficult"
    assert page.summary["negatives (no object)"] == "1"
    assert page.summary["objects quarantined"] == "1 (box_outside_image 1)"
    load = page.summary.get("load it") or _section(text, "summary")
    assert "mx.io.ImageDetRecordIter(" in html.unescape(load)
    assert "label_pad_width=16" in html.unescape(load)  # 4 + 6 x 2 objects at most
    assert all(src.startswith("data:image/") for src in page.imgs)  # one self-contained page


def test_samples_draw_every_box_in_its_class_colour(built):
    _, rows, text, _ = built
    samples = _samples(text)
    by_key = {r["source_key"]: r for r in rows}
    headings = re.findall(r"<h3><i class=\"swatch\"[^>]*></i>([^<]+) <span class=\"muted\">"
                          r"\(([^)]*)\)", _section(text, "samples"))
    assert headings == [("cat", "6 objects in 6 images"), ("dog", "2 objects in 2 images"),
                        ("person", "1 objects in 1 images")]
    # cat is in 6 records: a bounded sample of them; then the negative
    blocks = _section(text, "samples").split('<div class="cls">')[1:]
    assert [b.count("<figure") for b in blocks] == [BOX_SAMPLES_PER_CLASS, 2, 1, 1]
    assert "no object" in blocks[-1] and "no object (a negative)" in samples[-1][0]
    checked = 0
    for title, img in samples:
        r = by_key[title.split("\n")[0]]
        assert f"record {r['split']}/{r['key']}" in title
        assert img.shape[:2] == (H, W)  # 160 x 120 fits the 192 px thumbnail unscaled
        _, objects = detection_label.decode(r["label"])
        for cls, *box, difficult in objects:
            edge = _edge_pixels(img, box)
            hit = sum(_near(p, COLORS[int(cls)]) for p in edge) / len(edge)
            if difficult:  # dashed: coloured dashes with gaps between them
                assert 0.25 < hit < 0.9, (title, hit)
                on = [_near(p, COLORS[int(cls)]) for p in edge]
                assert sum(a != b for a, b in zip(on[:-1], on[1:], strict=True)) >= 6  # dashes
            else:
                assert hit > 0.9, (title, CLASSES[int(cls)], hit)
            checked += 1
        if not len(objects):  # a negative: nothing drawn
            assert np.abs(img - GREY).max() < 30
        else:  # inside the boxes and off them the image is untouched
            assert _near(img[2, W - 3], (GREY,) * 3, 20)
    assert checked >= 6


def test_charts_show_objects_per_image_box_sizes_and_objects_per_class(built):
    _, _, text, _ = built
    charts = _section(text, "charts")
    for title in ("objects per class and split", "objects per image",
                  "box size (stored pixels)", "box size (relative)"):
        assert f"<title>{title}</title>" in charts, title
    # the class balance by objects: cat 5 in train and 1 in val, dog 2, person 1
    for bar in ("cat / train: 5", "cat / val: 1", "dog / train: 2", "person / train: 1"):
        assert f"<title>{bar}</title>" in charts, bar
    per_image = charts.split("<title>objects per image</title>")[1].split("</svg>")[0]
    counts = [int(n) for n in re.findall(r"<title>[^<]*: (\d+) images</title>", per_image)]
    assert counts == [1, 5, 2]  # 1 negative, 5 images with one object, 2 with two
    sizes = charts.split("<title>box size (stored pixels)</title>")[1].split("</svg>")[0]
    objects = sum(int(n) for n in re.findall(r": (\d+) objects</title>", sizes))
    assert objects == 9
    assert "small (&lt; 32²) <b>0</b>" in charts  # √area: every box is 39 px or more


def test_refused_objects_are_listed_with_their_box_on_the_source_image(built):
    _, _, text, page = built
    q = _section(text, "quarantine")
    assert 'id="refused-objects"' in q
    refused = q.split('id="refused-objects"')[1]
    row = refused.split("<tbody>")[1].split("</tr>")[0]
    for cell in ("JPEGImages/000001.jpg", "object 3", "100, 20, 190, 80", "box_outside_image",
                 "fix it in the labelling tool"):
        assert cell in row, cell
    # the whole-image entry is listed as before, in its own table
    whole = q.split('id="refused-objects"')[0]
    assert "JPEGImages/broken.jpg" in whole and "undecodable" in whole
    assert "object 3" not in whole
    src = re.search(r'<img src="([^"]+)" alt="refused object">', row).group(1)
    img = _image(src)
    h, w = img.shape[:2]
    # the box reaches 30 px right of the 160 px image: a grey margin makes room for it
    assert w / h == pytest.approx((W + 32) / H, rel=0.05)
    magenta = np.array([_near(p, REFUSED_RGB, 80) for p in img.reshape(-1, 3)]).reshape(h, w)
    assert magenta.any()
    cols = np.flatnonzero(magenta.any(axis=0))
    assert cols.min() == pytest.approx(100 * w / (W + 32), abs=3)  # the box's left edge
    assert cols.max() > W * w / (W + 32)  # it reaches into the margin
    assert _near(img[h // 2, 5], (255, 255, 255), 30)  # the source image itself is white


def test_render_record_draws_the_boxes_at_the_stored_size(built, tmp_path):
    root, rows, _, _ = built
    r = rows[1]  # dog and a difficult person
    png, got = render_record(str(root / "out"), r["key"], tmp_path / "one.png")
    assert got["key"] == r["key"]
    img = np.asarray(Image.open(png).convert("RGB")).astype(int)
    assert img.shape[:2] == (H, W)
    edge = _edge_pixels(img, (0.20, 0.20, 0.80, 0.90))
    assert sum(_near(p, COLORS[1], 40) for p in edge) / len(edge) > 0.9


def test_the_diff_counts_objects_per_class(built, tmp_path):
    root, _, _, _ = built
    more = [*RECORDS, ("train", [(1, 0.1, 0.1, 0.5, 0.5, 0), (1, 0.5, 0.5, 0.9, 0.9, 0)])]
    write_detection_output(tmp_path / "v2", more)
    text = build_report(str(tmp_path / "v2"), tmp_path / "r.html",
                        previous=str(root / "out")).read_text()
    diff = _section(text, "diff")
    assert "<th>objects before</th>" in diff
    assert re.search(r"<td>dog</td><td class=\"num\">2</td><td class=\"num\">4</td>"
                     r"<td class=\"num\">\+2</td>", diff), diff


def test_a_detection_output_without_refused_objects(tmp_path):
    write_detection_output(tmp_path / "out", quarantine=())
    page = Page(build_report(str(tmp_path / "out"), tmp_path / "r.html").read_text())
    assert page.summary["objects quarantined"] == "0"
    assert "Nothing was quarantined." in page.words


def test_histogram_bins_as_equal_width_bins():
    """The numpy binning counts what one value at a time did: bin i holds lo + i·width up to
    the next, the maximum in the last bin."""
    rng = np.random.default_rng(3)
    values = list(rng.integers(0, 50, 400)) + [7.25, 49]
    svg = histogram("h", values, bins=7)
    lo, hi = min(values), max(values)
    want = [0] * 7
    for v in values:
        want[min(int((v - lo) / (hi - lo) * 7), 6)] += 1
    got = [int(n) for n in re.findall(r": (\d+) images</title>", svg)]
    assert got == want
