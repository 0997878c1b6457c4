"""The dataset report: published with every version, self-contained, every section filled
from the real data (through the real S3 server), and the diff against the previous version."""

from __future__ import annotations

import base64
import io
import json
from html.parser import HTMLParser

import numpy as np
import pytest
from PIL import Image

from recforge import pipeline, storage
from recforge.cli import main
from recforge.report import build_report, render_record
from recforge.report.sections import sections_for
from tests.common.helpers import jpeg
from tests.common.sources import BAD, make_source, make_spec

pytestmark = pytest.mark.pipeline  # whole builds, two in one module fixture: a slow tier


class Page(HTMLParser):
    def __init__(self, text: str):
        super().__init__()
        self.ids, self.imgs, self.links, self.text = set(), [], [], []
        self.captions: list[str] = []  # every figure's caption text
        self.titles: list[str] = []  # every figure's hover text
        self.summary: dict[str, str] = {}  # the summary table: row name → its text
        self._in: str | None = None
        self._row: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "figure":
            self.titles.append(a.get("title", ""))
        if tag == "figcaption":
            self._in, self._buf = "caption", []
        if tag == "table" and "kv" in (a.get("class") or "") and not self.summary:
            self._in = "kv"
        if self._in == "kv" and tag == "td":
            self._row.append("")
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "img":
            self.imgs.append(a.get("src", ""))
        for attr in ("href", "src"):
            if attr in a and tag != "img":
                self.links.append(a[attr])

    def handle_endtag(self, tag):
        if tag == "figcaption" and self._in == "caption":
            self.captions.append("".join(self._buf))
            self._in = None
        if self._in == "kv" and tag == "tr" and len(self._row) >= 2:
            self.summary[self._row[0]] = self._row[1]
            self._row = []
        if self._in == "kv" and tag == "table":
            self._in = None

    def handle_data(self, data):
        self.text.append(data)
        if self._in == "caption":
            self._buf.append(data)
        elif self._in == "kv" and self._row:
            self._row[-1] += data

    @property
    def words(self) -> str:
        return " ".join(self.text)


def _decoded(src: str) -> Image.Image:
    assert src.startswith("data:image/"), src[:40]
    return Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1])))


@pytest.fixture(scope="module")
def two_versions(s3_endpoint, tmp_path_factory):
    """v1 of a 3-class source, then v2 with one image changed, one removed and a new class."""
    bucket = f"report-{tmp_path_factory.mktemp('x').name[-6:].lower()}"
    storage.s3_client().create_bucket(Bucket=bucket)
    make_source(bucket)
    spec = make_spec(bucket, quality={"severity": {"near_duplicates": "warn"}})
    first = pipeline.build(spec, run_id="r1", workers=1)
    client = storage.s3_client()
    client.delete_object(Bucket=bucket, Key="raw/cat/0.png")
    client.put_object(Bucket=bucket, Key="raw/dog/a/b/5.jpg",  # same key, new content
                      Body=jpeg(90, 320, seed=777))
    for i in range(6):  # a new class
        client.put_object(Bucket=bucket, Key=f"raw/fox/{i}.jpg", Body=jpeg(70, 300, seed=900 + i))
    second = pipeline.build(spec, run_id="r2", workers=1)
    return bucket, first, second


def test_every_version_publishes_a_self_contained_report(two_versions, tmp_path):
    _, first, _ = two_versions
    uri = first["publish"]["report"]
    assert uri == f"{first['publish']['uri']}/report.html"
    text = storage.get_bytes(uri).decode("utf-8")
    page = Page(text)
    assert {s.sid for s in sections_for("classification")} <= page.ids
    assert "masks" not in page.ids  # a classification dataset has no Masks section
    # nothing leaves the machine: every image is inline, every link relative or an anchor
    assert page.imgs and all(src.startswith("data:image/") for src in page.imgs)
    assert all(not link.startswith(("http:", "https:", "//")) for link in page.links), page.links
    assert len(text.encode()) < 2 << 20
    sizes = [_decoded(src).size for src in page.imgs]
    assert all(0 < w <= 224 and 0 < h <= 224 for w, h in sizes)  # thumbnails, not originals
    words = page.words
    for cls in ("cat", "dog", "eel"):
        assert cls in words
    for key, reason in BAD.items():  # the quarantine table names every object and reason
        assert key in words and reason in words
    assert "records per class and split" in text and "image short side" in text
    assert "loader throughput" in text
    assert "first version" in words  # nothing to diff against yet


def test_report_names_the_published_version_and_its_files(two_versions):
    """Built in the quality gate, before publish, the report names the version it is
    published as — its location, latest.json, a loading snippet — never staging; its
    captions are the source files, the record keys only on hover."""
    bucket, first, _ = two_versions
    version = first["publish"]["uri"]
    page = Page(storage.get_bytes(first["publish"]["report"]).decode("utf-8"))
    assert page.summary["location"] == version
    assert page.summary["report"] == f"{version}/report.html"
    assert page.summary["latest"].startswith(f"s3://{bucket}/datasets/pets/latest.json")
    assert 'path_imgrec="train.rec", path_imgidx="train.idx"' in page.summary["load it"]
    assert f"aws s3 cp {version}/train.rec" in page.summary["load it"]
    assert f"recforge report {version} --open" in page.summary["load it"]
    assert "_staging" not in " ".join(page.summary.values())
    records = storage.read_jsonl(f"{version}/records.jsonl")
    sources = {r["source_key"] for r in records}
    keys = {str(r["key"]) for r in records}
    assert page.captions and set(page.captions) <= sources, page.captions[:5]
    assert not any(c in keys for c in page.captions)
    assert all(any(k in t for k in keys) for t in page.titles)  # the key on hover
    # the checklist says what a severity does; the loader section is a table with a floor
    text = storage.get_bytes(first["publish"]["report"]).decode("utf-8")
    assert "blocks publish" in text
    loader = text.split('id="loader"')[1]
    assert "<table>" in loader.split("</div>")[0] and "img/s" in loader


def test_a_failed_gate_report_says_it_was_not_published(tmp_path):
    """A failed gate keeps the report in the run's unpublished folder: it names the folder
    and says so."""
    from recforge.quality import QualityGateFailed
    from recforge.spec import parse_spec
    from tests.common.sources import SMALL_BENCH

    for cls in ("cat", "dog"):
        (tmp_path / "src" / cls).mkdir(parents=True)
        for i in range(4):
            (tmp_path / "src" / cls / f"{i}.jpg").write_bytes(jpeg(40, 48, seed=i))
    spec = parse_spec({
        "name": "pets", "source": {"uri": str(tmp_path / "src")},
        "splits": {"val_ratio": 0.0, "seed": 1}, "pack": {"resize": 32, "shard_size": 8},
        "bench": SMALL_BENCH, "publish": {"uri": str(tmp_path / "pub")},
        "quality": {"loader": {"min_images_per_sec": 1e9}}})
    with pytest.raises(QualityGateFailed):
        pipeline.build(spec, run_id="f1", workers=1)
    staged = next((tmp_path / "pub").rglob("report.html"))
    page = Page(staged.read_text())
    assert "Not published." in page.words and "loader_throughput" in page.words
    assert page.summary["location"].startswith(f"unpublished: {staged.parent}")
    assert not (staged.parent / "manifest.json").exists()
    assert "NOT published" in page.summary["version"]
    assert "load it" not in page.summary and "latest" not in page.summary


def test_checklist_shows_warn_as_warn(two_versions):
    _, first, _ = two_versions
    quality = storage.read_json(f"{first['publish']['uri']}/quality/quality.json")
    page = storage.get_bytes(first["publish"]["report"]).decode("utf-8")
    for name, check in quality["checks"].items():
        assert f"<b>{name}</b>" in page
        shown = {"passed": "pass", "warning": "warn", "failed": "fail"}.get(check["status"])
        row = page.split(f"<b>{name}</b>")[1].split("</tr>")[0]
        if shown:
            assert f'<span class="{shown} nw">{shown}</span>' in row
        # the severity says what a failure does, not fail/warn beside pass
        said = {"fail": "blocks publish", "warn": "warns", "off": "off"}[check["severity"]]
        assert f'<span class="nw">{said}</span>' in row
        if check["status"] == "warning":  # what it means, what to do, why it did not block
            assert "Means:" in row and "To do:" in row and "Does not block publish" in row


def test_report_diffs_against_the_previous_version(two_versions):
    _, first, second = two_versions
    manifest = storage.read_json(f"{second['publish']['uri']}/manifest.json")
    assert manifest["previous_uri"] == first["publish"]["uri"]
    words = Page(storage.get_bytes(second["publish"]["report"]).decode("utf-8")).words
    assert "6 added, 1 removed, 1 changed" in " ".join(words.split())
    assert "cat/0.png" in words and "dog/a/b/5.jpg" in words and "fox/" in words
    assert "+6" in words  # fox: 0 → 6 records


def test_cli_report_and_show(two_versions, tmp_path, capsys):
    _, first, _ = two_versions
    version = first["publish"]["uri"]
    assert main(["report", version, "-o", str(tmp_path / "r")]) == 0
    assert (tmp_path / "r" / "report.html").exists()
    assert "report:" in capsys.readouterr().out
    records = storage.read_jsonl(f"{version}/records.jsonl")
    r = records[3]
    assert main(["show", version, str(r["key"]), "--split", r["split"], "-o",
                 str(tmp_path / "one.png")]) == 0
    with Image.open(tmp_path / "one.png") as im:
        assert im.size == (r["width"], r["height"])
    with pytest.raises(KeyError, match="no record with key 99999"):
        render_record(version, 99999, tmp_path / "x.png")


def test_cli_report_of_a_dataset_prefix_reports_its_latest_version(two_versions, tmp_path,
                                                                   capsys):
    """What validate, verify and show take, report takes: the dataset prefix means the
    version latest.json names."""
    _, first, second = two_versions
    dataset = first["publish"]["uri"].rsplit("/", 1)[0]
    latest = second["publish"]["uri"]
    assert main(["report", dataset + "/", "-o", str(tmp_path)]) == 0
    assert f"is a dataset prefix: reporting on its latest version {latest}" in \
        capsys.readouterr().err
    page = Page((tmp_path / "report.html").read_text())
    assert page.summary["version"] == second["publish"]["version"]
    assert page.summary["report"] == f"{latest}/report.html"
    assert main(["report", str(tmp_path / "nope"), "-o", str(tmp_path)]) == 2
    assert "the local folder" in capsys.readouterr().err


def test_published_data_docs_link_back_to_the_versions_report(two_versions):
    """The pipeline's site sits in the version's quality/, its report beside it: the link is
    relative, so it resolves wherever the version folder is served."""
    _, first, _ = two_versions
    version = first["publish"]["uri"]
    index = Page(storage.get_bytes(f"{version}/quality/index.html").decode("utf-8"))
    assert "../report.html" in index.links
    assert storage.exists(f"{version}/report.html")


def test_segmentation_report_overlays_masks_with_a_legend(tmp_path):
    from tests.common.segdata import block_ids, cityscapes_color, png
    from tests.common.sources import SMALL_BENCH

    src = tmp_path / "src"
    for n in range(10):
        ids = block_ids(64, 48, [7, 8, 11, 26], block=8, seed=n)
        for key, data in ((f"img/{n}.png", png(np.random.default_rng(n).integers(
                0, 256, (48, 64, 3), np.uint8))), (f"lbl/{n}.png", png(cityscapes_color(ids)))):
            (src / key).parent.mkdir(parents=True, exist_ok=True)
            (src / key).write_bytes(data)
    from recforge.spec import parse_spec

    spec = parse_spec({
        "name": "city", "task": "segmentation",
        "source": {"uri": str(src), "pairs": {"images": "img", "masks": "lbl"}},
        "segmentation": {"colormap": "cityscapes"}, "splits": {"val_ratio": 0.2, "seed": 2},
        "pack": {"resize": 0, "encoding": ".png", "shard_size": 4}, "bench": SMALL_BENCH,
        "publish": {"uri": str(tmp_path / "pub")}})
    out = pipeline.build(spec, run_id="s1", workers=1)["publish"]
    page = Page((tmp_path / "pub" / "city" / out["version"] / "report.html").read_text())
    assert "masks" in page.ids and "road" in page.words and "sidewalk" in page.words
    assert "pixels per class" in " ".join(page.text)
    overlays = [_decoded(s) for s in page.imgs if _decoded(s).size == (64, 48)]
    assert overlays  # image + mask blended at full size (64x48 fits the 224 px overlay)
    png_out = tmp_path / "rec.png"
    rec = json.loads((tmp_path / "pub" / "city" / out["version"] / "records.jsonl")
                     .read_text().splitlines()[0])
    render_record(str(tmp_path / "pub" / "city" / out["version"]), rec["key"], png_out,
                  split=rec["split"])
    assert Image.open(png_out).size == (64, 48)


def test_report_of_a_prefix_without_records_names_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="so it is no packed dataset"):
        build_report(str(tmp_path), tmp_path / "r.html")


def test_coalesced_thumbnail_reads_render_the_same_page(two_versions, tmp_path, monkeypatch):
    """The thumbnails are read in a few coalesced GETs; the page equals one GET each."""
    from recforge.report.records import Records

    _, _, second = two_versions
    prefix = second["publish"]["uri"]
    calls = []
    real = storage.get_range
    for home in (storage, storage.objects):  # the images' reads, and the coalesced ones
        monkeypatch.setattr(home, "get_range", lambda *a: calls.append(a) or real(*a))
    coalesced = build_report(prefix, tmp_path / "a.html").read_bytes()
    n_coalesced = len(calls)
    calls.clear()
    monkeypatch.setattr(Records, "prefetch", lambda self, records: None)
    one_each = build_report(prefix, tmp_path / "b.html").read_bytes()
    assert coalesced == one_each
    assert n_coalesced < len(calls)


def test_both_loaders_are_charted_side_by_side(tmp_path):
    from recforge.spec import parse_spec
    from tests.common.helpers import jpeg
    from tests.common.sources import SMALL_BENCH

    for cls in ("cat", "dog"):
        for i in range(24):
            (tmp_path / "src" / cls).mkdir(parents=True, exist_ok=True)
            (tmp_path / "src" / cls / f"{i}.jpg").write_bytes(jpeg(64, 80, seed=i))
    spec = parse_spec({
        "name": "pets", "source": {"uri": str(tmp_path / "src")},
        "splits": {"val_ratio": 0.0, "seed": 1}, "pack": {"resize": 64, "shard_size": 24},
        "bench": {**SMALL_BENCH, "loader": "both"}, "publish": {"uri": str(tmp_path / "pub")}})
    out = pipeline.build(spec, run_id="b1", workers=1)["publish"]
    version = tmp_path / "pub" / "pets" / out["version"]
    bench = json.loads((version / "bench.json").read_text())
    assert bench["host"]["mxnet"] == "1.9.1" and bench["dali"]["host"]["dali"]
    text = (version / "report.html").read_text()
    assert "loader throughput" in text and "DALI loader throughput" in text
