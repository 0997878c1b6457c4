"""The list layout: each list format and column option, every bad row with its reason, the
refusals, and a Kaggle-style train.csv built from docs/datasets.md's spec on local S3."""

from __future__ import annotations

import pytest

from recforge import run_state
from recforge.errors import SpecError
from recforge.layouts import lists
from recforge.quarantine import FIXES
from recforge.spec import parse_spec
from tests.common import mini_imagenet
from tests.common.datasets_doc import spec_from_doc
from tests.common.detection import build


def make_spec(tmp_path, **overrides):
    data = {"name": "l", "task": "classification", "schedule": None,
            "source": {"uri": str(tmp_path / "raw"), "layout": "list"},
            "publish": {"uri": str(tmp_path / "pub")}}
    for dotted, value in overrides.items():
        node = data
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    if "source.lists" not in overrides and "source.list_uri" not in overrides:
        data["source"]["list_uri"] = str(tmp_path / "raw" / "list.csv")
    return parse_spec(data)


def write(tmp_path, name: str, text: str | bytes) -> str:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return str(path)


def rows(*keys: str) -> list[dict]:
    return [{"key": k, "size": 10, "etag": f"e-{k}"} for k in keys]


def flatten(objects: list[str], spec):
    """The layout's verdict, checked to put every object in exactly one place."""
    out = lists.flatten(rows(*objects), spec)
    places = ([i["source_key"] for i in out.items]
              + [e.source_key for e in out.refused if not e.is_part]
              + out.used + [n.key for n in out.not_used])
    assert sorted(places) == sorted(objects)
    assert all(e.reason in FIXES for e in out.refused)
    return out


def labels(out) -> dict[str, tuple]:
    return {i["source_key"]: (i.get("split"), i["class_name"]) for i in out.items}


def reasons(out) -> dict[str, str]:
    return {e.source_key: e.reason for e in out.refused if not e.is_part}


def parts(out) -> list[tuple[str, str, str]]:
    return [(e.source_key, e.part, e.reason) for e in out.refused if e.is_part]


# ----------------------------------------------------------------------------- formats

def test_csv_with_header_labels_the_images_it_names(tmp_path):
    write(tmp_path, "raw/list.csv", "key,label\na/1.jpg,cat\nb/2.jpg,dog\n")
    out = flatten(["a/1.jpg", "b/2.jpg", "c/3.jpg", "list.csv", "notes.txt"],
                  make_spec(tmp_path))
    assert labels(out) == {"a/1.jpg": (None, "cat"), "b/2.jpg": (None, "dog")}
    assert out.used == ["list.csv"]
    assert {n.key: n.reason for n in out.not_used} == {"c/3.jpg": "not_listed",
                                                       "notes.txt": "not_a_list"}
    assert out.refused == []


def test_csv_bom_crlf_quotes_and_blank_lines(tmp_path):
    write(tmp_path, "raw/list.csv",
          b'\xef\xbb\xbfkey,label\r\n"a, b/1.jpg","Tinca tinca"\r\n\r\nc.jpg,x\r\n')
    out = flatten(["a, b/1.jpg", "c.jpg", "list.csv"], make_spec(tmp_path))
    assert labels(out) == {"a, b/1.jpg": (None, "Tinca tinca"), "c.jpg": (None, "x")}


def test_columns_by_name_in_any_order(tmp_path):
    write(tmp_path, "raw/list.csv", "label,extra,file\ncat,1,x.jpg\n")
    out = flatten(["x.jpg", "list.csv"], make_spec(
        tmp_path, **{"source.columns": {"key": "file", "label": "label"}}))
    assert labels(out) == {"x.jpg": (None, "cat")}


def test_tsv_by_position_header_decided_from_the_file(tmp_path):
    cols = {"key": 1, "label": 0}
    write(tmp_path, "raw/l1.tsv", "class\tpath\ncat\tx.jpg\n")  # 'path' names no image
    out = flatten(["x.jpg", "l1.tsv"], make_spec(
        tmp_path, **{"source.list_uri": str(tmp_path / "raw/l1.tsv"), "source.columns": cols}))
    assert labels(out) == {"x.jpg": (None, "cat")} and out.refused == []
    write(tmp_path, "raw/l2.tsv", "cat\tx.jpg\ndog\ty.jpg\n")  # no header: first row is data
    out = flatten(["x.jpg", "y.jpg"], make_spec(
        tmp_path, **{"source.list_uri": str(tmp_path / "raw/l2.tsv"), "source.columns": cols}))
    assert labels(out) == {"x.jpg": (None, "cat"), "y.jpg": (None, "dog")}


def test_header_true_with_positions_skips_the_first_row(tmp_path):
    write(tmp_path, "raw/list.csv", "x.jpg,first\nx.jpg,cat\n")
    out = flatten(["x.jpg", "list.csv"], make_spec(
        tmp_path, **{"source.columns": {"key": 0, "label": 1, "header": True}}))
    assert labels(out) == {"x.jpg": (None, "cat")}


def test_caffe_space_separated_txt(tmp_path):
    write(tmp_path, "lists/train.txt", "n01440764/n01440764_10026.JPEG 0\n"
          "n01443537/n01443537_10007.JPEG   1\n")
    out = flatten(["n01440764/n01440764_10026.JPEG", "n01443537/n01443537_10007.JPEG"],
                  make_spec(tmp_path, **{"source.list_uri": str(tmp_path / "lists/train.txt"),
                                         "source.columns": {"key": 0, "label": 1}}))
    assert labels(out) == {"n01440764/n01440764_10026.JPEG": (None, "0"),
                           "n01443537/n01443537_10007.JPEG": (None, "1")}


def test_im2rec_lst_float_labels_are_class_names(tmp_path):
    write(tmp_path, "raw/data.lst", "0\t3.000000\tcat/a.jpg\n1\t10.000000\tdog/b.jpg\n"
          "2\t0.500000\tc.jpg\n")
    out = flatten(["cat/a.jpg", "dog/b.jpg", "c.jpg", "data.lst"], make_spec(
        tmp_path, **{"source.list_uri": str(tmp_path / "raw/data.lst")}))
    assert labels(out) == {"cat/a.jpg": (None, "3"), "dog/b.jpg": (None, "10"),
                           "c.jpg": (None, "0.5")}


def test_bad_lst_lines_are_reported_rows(tmp_path):
    write(tmp_path, "raw/data.lst", "0\t1.000000\tok.jpg\nx\t1.0\tbad.jpg\n"
          "2\tcat\tbad.jpg\n3\t1.0\t2.0\tbad.jpg\n4\t1.0\n")
    out = flatten(["ok.jpg", "bad.jpg", "data.lst"], make_spec(
        tmp_path, **{"source.list_uri": str(tmp_path / "raw/data.lst")}))
    assert labels(out) == {"ok.jpg": (None, "1")}
    assert parts(out) == [("data.lst", f"row {n}", "bad_lst_line") for n in (2, 3, 4, 5)]
    assert [n.key for n in out.not_used] == ["bad.jpg"]


def test_key_match_stem_finds_imagenet_val_names(tmp_path):
    write(tmp_path, "LOC_val_solution.csv", "ImageId,PredictionString\n"
          "ILSVRC2012_val_00000002,n01443537 1 2 3 4 n01443537 5 6 7 8 \n"
          "ILSVRC2012_val_00000001,n01440764 1 2 3 4 \n")
    out = flatten(["val/ILSVRC2012_val_00000001.JPEG", "val/ILSVRC2012_val_00000002.JPEG"],
                  make_spec(tmp_path, **{
                      "source.list_uri": str(tmp_path / "LOC_val_solution.csv"),
                      "source.columns": {"key": "ImageId", "label": "PredictionString",
                                         "label_token": "first", "key_match": "stem"}}))
    assert labels(out) == {"val/ILSVRC2012_val_00000001.JPEG": (None, "n01440764"),
                           "val/ILSVRC2012_val_00000002.JPEG": (None, "n01443537")}


def test_key_match_name_and_stem_refuse_a_name_two_images_share(tmp_path):
    write(tmp_path, "raw/list.csv", "key,label\nx.jpg,cat\ny.jpg,dog\n")
    objects = ["train/x.jpg", "test/x.jpg", "train/y.jpg", "list.csv"]
    out = flatten(objects, make_spec(tmp_path, **{"source.columns.key_match": "name"}))
    assert labels(out) == {"train/y.jpg": (None, "dog")}
    assert parts(out) == [("list.csv", "row 2", "list_key_ambiguous")]
    assert {n.key for n in out.not_used} == {"train/x.jpg", "test/x.jpg"}
    out = flatten(objects, make_spec(tmp_path))  # by path, neither row names an image
    assert [p[2] for p in parts(out)] == ["listed_image_missing"] * 2


# ----------------------------------------------------------------------------- bad rows

def test_a_row_naming_no_image_is_a_reported_part_of_its_list(tmp_path):
    write(tmp_path, "raw/list.csv", "key,label\na.jpg,cat\ngone.jpg,dog\n")
    out = flatten(["a.jpg", "list.csv"], make_spec(tmp_path))
    assert labels(out) == {"a.jpg": (None, "cat")}
    [entry] = out.refused
    assert (entry.source_key, entry.part, entry.reason) == ("list.csv", "row 3",
                                                            "listed_image_missing")
    assert "'gone.jpg'" in entry.detail and entry.is_part
    outside = write(tmp_path, "elsewhere/list.csv", "key,label\ngone.jpg,dog\na.jpg,cat\n")
    out = flatten(["a.jpg"], make_spec(tmp_path, **{"source.list_uri": outside}))
    assert parts(out) == [(outside, "row 2", "listed_image_missing")]


def test_a_row_without_a_label_quarantines_its_image(tmp_path):
    write(tmp_path, "raw/list.csv", "key,label\na.jpg,\nb.jpg\nc.jpg,cat\n")
    out = flatten(["a.jpg", "b.jpg", "c.jpg", "list.csv"], make_spec(tmp_path))
    assert labels(out) == {"c.jpg": (None, "cat")}
    assert reasons(out) == {"a.jpg": "list_no_label", "b.jpg": "list_no_label"}


def test_a_row_without_a_key_is_a_bad_row(tmp_path):
    write(tmp_path, "raw/list.csv", "key,label\n,cat\na.jpg,dog\n")
    out = flatten(["a.jpg", "list.csv"], make_spec(tmp_path))
    assert parts(out) == [("list.csv", "row 2", "bad_list_row")]
    assert labels(out) == {"a.jpg": (None, "dog")}


def test_rows_that_disagree_quarantine_the_image_naming_both(tmp_path):
    write(tmp_path, "raw/list.csv", "key,label\na.jpg,cat\nb.jpg,dog\na.jpg,dog\nb.jpg,dog\n")
    out = flatten(["a.jpg", "b.jpg", "list.csv"], make_spec(tmp_path))
    assert labels(out) == {"b.jpg": (None, "dog")}  # the same row twice is one row
    [entry] = out.refused
    assert (entry.source_key, entry.reason) == ("a.jpg", "list_conflict")
    assert entry.detail == "list.csv row 4 gives 'dog', an earlier row of list.csv gives 'cat'"


def test_rows_that_differ_in_case_only_agree_under_labels_case_lower(tmp_path):
    write(tmp_path, "raw/list.csv", "key,label\na.jpg,Dog\na.jpg,dog\nb.jpg,DOG\n")
    out = flatten(["a.jpg", "b.jpg", "list.csv"], make_spec(tmp_path, **{
        "labels.case": "lower"}))
    assert labels(out) == {"a.jpg": (None, "dog"), "b.jpg": (None, "dog")}
    out = flatten(["a.jpg", "b.jpg", "list.csv"], make_spec(tmp_path))
    assert reasons(out) == {"a.jpg": "list_conflict"}
    assert labels(out) == {"b.jpg": (None, "DOG")}


def test_split_column_maps_through_splits_folders(tmp_path):
    write(tmp_path, "raw/list.csv", "key,label,subset\na.jpg,cat,training\n"
          "b.jpg,dog,validation\nc.jpg,dog,dev\nd.jpg,cat,val\nd.jpg,cat,train\n")
    out = flatten(["a.jpg", "b.jpg", "c.jpg", "d.jpg", "list.csv"], make_spec(
        tmp_path, **{"splits.from": "source", "source.columns.split": "subset"}))
    assert labels(out) == {"a.jpg": ("train", "cat"), "b.jpg": ("val", "dog")}
    assert reasons(out) == {"c.jpg": "list_unknown_split", "d.jpg": "list_conflict"}
    unknown = next(e for e in out.refused if e.source_key == "c.jpg")
    assert "'dev'" in unknown.detail and "validation" in unknown.detail


def test_lists_per_split_take_the_split_from_their_key(tmp_path):
    write(tmp_path, "raw/train.csv", "key,label\na.jpg,cat\n")
    write(tmp_path, "raw/val.csv", "key,label\nb.jpg,dog\na.jpg,cat\n")
    out = flatten(["a.jpg", "b.jpg", "train.csv", "val.csv"], make_spec(tmp_path, **{
        "splits.from": "source", "source.lists": {"train": str(tmp_path / "raw/train.csv"),
                                                  "val": str(tmp_path / "raw/val.csv")}}))
    assert labels(out) == {"b.jpg": ("val", "dog")}
    assert reasons(out) == {"a.jpg": "list_conflict"}  # in train and in val
    assert sorted(out.used) == ["train.csv", "val.csv"]


def test_folders_label_a_split_and_a_list_the_other(tmp_path):
    write(tmp_path, "val.csv", "key,label\nv1,dog\nv2,cat\n")
    objects = ["train/cat/c1.jpg", "train/dog/x/d1.jpg", "train/loose.jpg", "val/v1.jpg",
               "val/v2.jpg", "test/t1.jpg"]
    out = flatten(objects, make_spec(tmp_path, **{
        "splits.from": "source", "source.columns.key_match": "stem",
        "source.lists": {"train": "folders", "val": str(tmp_path / "val.csv")}}))
    assert labels(out) == {"train/cat/c1.jpg": ("train", "cat"),
                           "train/dog/x/d1.jpg": ("train", "dog"),
                           "val/v1.jpg": ("val", "dog"), "val/v2.jpg": ("val", "cat")}
    assert reasons(out) == {"train/loose.jpg": "not_in_class_folder"}
    assert {n.key: n.reason for n in out.not_used} == {"test/t1.jpg": "not_listed"}


def test_a_list_row_contradicting_the_class_folder_quarantines_the_image(tmp_path):
    write(tmp_path, "val.csv", "key,label\ntrain/cat/c1.jpg,dog\n")
    out = flatten(["train/cat/c1.jpg"], make_spec(tmp_path, **{
        "splits.from": "source",
        "source.lists": {"train": "folders", "val": str(tmp_path / "val.csv")}}))
    assert reasons(out) == {"train/cat/c1.jpg": "list_conflict"}
    assert out.refused[0].detail == f"{tmp_path}/val.csv row 2 gives 'dog' in val, its " \
        "class folder gives 'cat' in train"


# ----------------------------------------------------------------------------- refusals

@pytest.mark.parametrize(("overrides", "names"), [
    ({"splits.from": "source"}, ["columns.split", "source.lists"]),
    ({"source.columns.split": "subset"}, ["splits.from: hash", "columns.split"]),
    ({"source.list_uri": None, "source.lists": {"train": "/l/t.csv", "val": "/l/v.csv"}},
     ["source.lists", "splits.from: hash"]),
    ({"splits.from": "source", "source.list_uri": None, "source.columns.split": 2,
      "source.lists": {"train": "/l/t.csv"}}, ["source.lists", "columns.split"]),
])
def test_lists_that_contradict_splits_from_are_refused(tmp_path, overrides, names):
    spec = make_spec(tmp_path, **overrides)
    with pytest.raises(SpecError) as err:
        lists.flatten(rows("a.jpg"), spec)
    assert all(n in str(err.value) for n in names), str(err.value)


def test_a_named_column_the_header_lacks_is_refused(tmp_path):
    write(tmp_path, "raw/list.csv", "id,breed\na.jpg,cat\n")
    with pytest.raises(SpecError, match=r"no column 'key'.*\['id', 'breed'\]"):
        lists.flatten(rows("a.jpg"), make_spec(tmp_path))
    with pytest.raises(SpecError, match="has no header"):
        lists.flatten(rows("a.jpg"), make_spec(tmp_path, **{"source.columns.header": False}))


def test_an_extension_that_names_no_format_is_refused(tmp_path):
    write(tmp_path, "raw/labels.dat", "key,label\na.jpg,cat\n")
    spec = make_spec(tmp_path, **{"source.list_uri": str(tmp_path / "raw/labels.dat")})
    with pytest.raises(SpecError, match="columns.format"):
        lists.flatten(rows("a.jpg"), spec)
    spec = make_spec(tmp_path, **{"source.list_uri": str(tmp_path / "raw/labels.dat"),
                                  "source.columns.format": "csv"})
    assert ".dat" in lists.LAYOUT.extensions(spec)  # ingest accepts it: it is used
    out = flatten(["a.jpg", "labels.dat"], spec)
    assert labels(out) == {"a.jpg": (None, "cat")} and out.used == ["labels.dat"]


def test_a_list_that_does_not_exist_is_refused_naming_it(tmp_path):
    spec = make_spec(tmp_path, **{"splits.from": "source", "source.list_uri": None,
                                  "source.lists": {"train": "folders",
                                                   "val": str(tmp_path / "val.csv")}})
    with pytest.raises(SpecError, match=r"val.csv \(source.lists.val\) does not exist"):
        lists.flatten(rows("train/cat/a.jpg"), spec)


def test_lists_that_are_all_folders_are_refused_at_the_spec(tmp_path):
    with pytest.raises(SpecError, match="class_folders"):
        make_spec(tmp_path, **{"splits.from": "source", "source.lists": {"train": "folders"}})


# ----------------------------------------------------------------------------- on S3

def test_kaggle_train_csv_builds_from_the_doc(bucket):
    objects, truth = mini_imagenet.kaggle()
    mini_imagenet.upload(bucket, "aerial-cactus", objects)
    run = build(spec_from_doc("A Kaggle-style", bucket), "r1")
    records = mini_imagenet.check_build(
        run_state.out(run), truth, used=["train.csv"],
        not_used={**{f"test/{i}": "not_listed" for i in mini_imagenet.KAGGLE_TEST},
                  "sample_submission.csv": "not_a_list"})
    assert {label for _, label in records.values()} == {"0", "1"}
