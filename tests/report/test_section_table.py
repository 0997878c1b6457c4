"""The report's section table: every row's module renders a body with the one signature,
names only task kinds that exist, and a page of each kind holds exactly the sections shown
for it (and, of a section with one row per kind, that kind's variant)."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import numpy as np
import pytest

from recforge.format import detection_label, recordio
from recforge.kinds import KINDS, NAMES
from recforge.report import build_report, sections
from recforge.report.inputs import load
from recforge.report.render import DRAWN
from recforge.report.sections import SECTIONS, sections_for
from recforge.report.sections.changes import COUNTS
from recforge.report.sections.charts import BALANCE
from recforge.report.sections.loading import SNIPPETS
from recforge.report.sections.summary import KIND_ROWS
from tests.common.helpers import jpeg
from tests.common.segdata import png

CLASSES = ["cat", "dog"]


def write_output(out: Path, name: str, n: int = 6) -> None:
    """A run's out/ of a dataset of this task kind: train.rec/.idx (and its masks where the
    kind has them), records.jsonl, classes.json, summary.json."""
    k = KINDS[name]
    out.mkdir(parents=True)
    rows = []
    with recordio.RecordWriter(out / "train.rec", out / "train.idx") as w:
        for i in range(n):
            c = i % len(CLASSES)
            label = detection_label.encode(48, 40, [(c, 0.1, 0.1, 0.6, 0.7, 0)]) if k.boxes \
                else float(c)
            payload = recordio.pack_image_record(label, i, jpeg(40, 48, seed=i))
            rows.append({"key": i, "split": "train", "offset": w.write(i, payload),
                         "length": len(payload), "height": 40, "width": 48,
                         "label": label if k.boxes else c,
                         "class_name": CLASSES[c] if k.image_class else None,
                         "source_key": f"img/{i}.jpg", "source_sha256": f"{i:064x}"})
    if k.masks:
        with recordio.RecordWriter(out / "train_mask.rec", out / "train_mask.idx") as w:
            for i, r in enumerate(rows):
                mask = np.full((40, 48), i % len(CLASSES), np.uint8)
                payload = recordio.pack_image_record(0.0, i, png(mask))
                r.update(mask_offset=w.write(i, payload), mask_length=len(payload),
                         class_pixels={str(i % len(CLASSES)): 40 * 48})
    (out / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    classes = {"classes": CLASSES, "num_classes": len(CLASSES),
               "ids": {c: i for i, c in enumerate(CLASSES)}}
    if k.masks:
        classes["ignore_index"] = 255
    if k.boxes:
        classes["task"] = name
    (out / "classes.json").write_text(json.dumps(classes))
    (out / "summary.json").write_text(json.dumps({"listed": n, "packed": n, "quarantined": 0}))


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("kinds")
    for name in NAMES:
        write_output(root / name, name)
    return {name: root / name for name in NAMES}


@pytest.mark.parametrize("row", SECTIONS, ids=lambda s: s.module)
def test_every_row_names_a_module_with_the_one_signature(row):
    module = sections.module(row)
    assert module.__name__ == f"recforge.report.sections.{row.module}"
    assert list(inspect.signature(module.render).parameters) == ["ctx"]
    assert row.kinds and set(row.kinds) <= set(NAMES), row.kinds
    assert row.sid and row.heading


def test_rows_are_one_module_each_and_one_section_per_anchor_and_kind():
    assert len({s.module for s in SECTIONS}) == len(SECTIONS)
    for name in NAMES:
        shown = sections_for(name)
        assert len({s.sid for s in shown}) == len(shown), name
    for sid in {s.sid for s in SECTIONS}:  # variants of a section share its heading
        assert len({s.heading for s in SECTIONS if s.sid == sid}) == 1, sid


@pytest.mark.parametrize("table", [SNIPPETS, KIND_ROWS, BALANCE, COUNTS, DRAWN],
                         ids=["snippets", "summary rows", "balance", "counts", "drawn"])
def test_every_per_kind_lookup_names_every_kind(table):
    assert sorted(table) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_a_page_holds_exactly_its_kinds_sections(outputs, name, tmp_path):
    text = build_report(str(outputs[name]), tmp_path / "r.html",
                        about={"dataset": "d", "task": name, "version": "v1",
                               "uri": str(tmp_path / "pub" / "d" / "v1")}).read_text()
    shown = sections_for(name)
    for s in shown:
        assert f'<section id="{s.sid}"><h2>{s.heading}</h2>' in text, s
        assert f'<a href="#{s.sid}">{s.heading}</a>' in text, s
    for sid in {s.sid for s in SECTIONS} - {s.sid for s in shown}:
        assert f'id="{sid}"' not in text and f'href="#{sid}"' not in text, sid
    assert text.count("<section ") == len(shown)


@pytest.mark.parametrize("name", NAMES)
def test_a_page_renders_its_kinds_variant_of_each_section(outputs, name, tmp_path,
                                                          monkeypatch):
    for s in SECTIONS:
        monkeypatch.setattr(sections.module(s), "render",
                            lambda ctx, m=s.module: f"<!--{m}-->")
    text = build_report(str(outputs[name]), tmp_path / "r.html",
                        about={"task": name}).read_text()
    for s in SECTIONS:
        assert (f"<!--{s.module}-->" in text) == s.shown_for(name), (name, s.module)


def test_records_paired_with_masks_are_the_masks_kind_without_a_manifest(outputs):
    """A run's out/ names no task for segmentation (no manifest yet): its masks do."""
    for name in NAMES:
        assert load(str(outputs[name])).kind == KINDS[name]


def test_the_sections_docstring_names_every_section_module():
    folder = Path(sections.__file__).parent
    modules = {p.stem for p in folder.glob("*.py") if p.name != "__init__.py"}
    assert set(re.findall(r"``(\w+)\.py``", sections.__doc__)) == modules
