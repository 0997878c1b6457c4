"""The DAG doc describes each dataset's real input: the paths its source layout reads and
where its labels come from, said by the layout itself (``recforge.layouts``), never a
classification wording for a detection or segmentation dataset."""

from __future__ import annotations

import re

import pytest

from recforge import layouts
from recforge.orchestration.docs import dag_doc
from recforge.spec import parse_spec

BASE = {"source": {"uri": "s3://raw-data/x"}, "publish": {"uri": "s3://datasets"}}
CITY = {"images": "leftImg8bit", "masks": "gtFine", "image_suffix": "_leftImg8bit.png",
        "mask_suffix": "_gtFine_labelIds.png"}

# (spec fields, the layout, words the Input row must hold, words the Labels row must hold)
CASES = {
    "classification class folders": (
        {}, "class_folders", ["\\<prefix>/\\<class>/[any/depth/]\\<image>"],
        ["classification; one class per first-level folder under the prefix"]),
    "classification split folders": (
        {"splits": {"from": "source"}}, "class_folders", ["\\<prefix>/\\<split>/\\<class>/"],
        ["one class per first-level folder under each split folder"]),
    "classification list": (
        {"source": {"layout": "list", "list_uri": "s3://raw-data/x/train.csv",
                    "columns": {"label": "breed"}}},
        "list", ["the images the list(s) s3://raw-data/x/train.csv name"],
        ["the class is the `breed` column of the list(s)"]),
    "segmentation cityscapes": (
        {"task": "segmentation", "source": {"pairs": CITY},
         "segmentation": {"colormap": "cityscapes"}},
        "pairs", ["(`paired_folders`)", "\\<prefix>/leftImg8bit/\\<path>_leftImg8bit.png with "
                  "\\<prefix>/gtFine/\\<path>_gtFine_labelIds.png"],
        ["segmentation; each image's mask", "colour map `cityscapes`"]),
    "segmentation ade20k": (
        {"task": "segmentation", "source": {"pairs": {"images": "images",
                                                      "masks": "annotations"}},
         "segmentation": {"id_map": {0: 255, 1: 0, 2: 1}}},
        "pairs", ["\\<prefix>/images/\\<path>.\\<ext> with \\<prefix>/annotations/\\<path>.png"],
        ["id map of 3 ids", "ignore 255"]),
    "segmentation pair list": (
        {"task": "segmentation", "source": {"pairs": {
            "layout": "pair_list", "list_uri": "s3://raw-data/x/pairs.tsv"}},
         "segmentation": {"colormap": "voc"}},
        "pairs", ["(`pair_list`)", "the image and mask keys of the pair list "
                  "s3://raw-data/x/pairs.tsv"], ["colour map `voc`"]),
    "detection voc": (
        {"task": "detection", "source": {"layout": "voc", "voc": {"years": [2007, 2012]}}},
        "voc", ["\\<prefix>/VOC2007/ and \\<prefix>/VOC2012/ holding JPEGImages/"],
        ["detection; objects from each `Annotations/<id>.xml`", "`<bndbox>` its box"]),
    "detection coco": (
        {"task": "detection", "source": {"layout": "coco"},
         "detection": {"crowd": "difficult"}},
        "coco", ["\\<prefix>/annotations/instances_\\<split>\\<year>.json"],
        ["detection; objects from the instances files", "crowd regions: difficult"]),
}


def spec_of(fields: dict):
    doc = {k: dict(v) for k, v in BASE.items()} | {"name": "x"}
    for key, value in fields.items():
        doc[key] = {**doc.get(key, {}), **value} if isinstance(value, dict) else value
    return parse_spec(doc)


def row(doc: str, name: str) -> str:
    (found,) = re.findall(rf"^\| {name} \| (.*) \|$", doc, re.M)
    return found


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_doc_names_the_real_input_of_each_kind_and_layout(case):
    fields, layout, inputs, labels = CASES[case]
    spec = spec_of(fields)
    doc = dag_doc(spec)
    assert row(doc, "Input").startswith(f"layout `{layout}`")
    for words in inputs:
        assert words in row(doc, "Input"), (case, row(doc, "Input"))
    for words in labels:
        assert words in row(doc, "Labels"), (case, row(doc, "Labels"))
    if layout != "class_folders":  # a detection DAG says nothing of class folders
        assert "folder" not in row(doc, "Labels") or "split folder" in row(doc, "Labels")
        assert "first-level folder" not in doc
    # the words are the layout's own: what a source where nothing matches is told
    assert layouts.for_spec(spec).expected(spec).replace("<", "\\<") in row(doc, "Input")


def test_every_registered_layout_is_described():
    """A layout added to the registry without a case here fails: its doc words are unseen."""
    assert {layout for _, layout, _, _ in CASES.values()} == set(layouts.names())
    for layout in layouts.names():
        assert layouts._registry()[layout].labels  # every layout says where labels come from


def test_no_angle_bracket_is_left_for_markdown_to_drop():
    """``<prefix>`` outside a code span is an HTML tag to Markdown: escaped as ``\\<``."""
    for fields, *_ in CASES.values():
        doc = dag_doc(spec_of(fields))
        outside = re.sub(r"`[^`]*`", "", doc)
        assert not re.search(r"(?<!\\)<[a-zA-Z]", outside), outside
