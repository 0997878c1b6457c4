"""Colour maps: the shipped tables, the collision rule and its overrides, custom formats."""

from __future__ import annotations

import pytest

from recforge.segmentation import colormaps
from recforge.segmentation.colormaps import ColorMapError, LabelDef, load_colormap
from tests.common.segdata import CITYSCAPES_TRAIN


def voc_color(i: int) -> tuple[int, int, int]:
    """The bit-interleaved PASCAL VOC palette, computed independently of the data file."""
    r = g = b = 0
    for j in range(8):
        r |= ((i >> (3 * j)) & 1) << (7 - j)
        g |= ((i >> (3 * j + 1)) & 1) << (7 - j)
        b |= ((i >> (3 * j + 2)) & 1) << (7 - j)
    return r, g, b


class TestCityscapes:
    def test_label_table(self):
        cm = load_colormap("cityscapes")
        assert [lab.id for lab in cm.labels] == [*range(34), -1]
        assert cm.label("license plate").color == (0, 0, 142)
        assert cm.label("road").color == (128, 64, 128)
        assert cm.label("bicycle").color == (119, 11, 32)
        assert cm.label("person").category == "human"
        for lab in cm.labels:
            assert lab.train_id == CITYSCAPES_TRAIN.get(lab.id, -1 if lab.id < 0 else 255)
        assert len(cm.classes("trainId")) == 19
        assert cm.classes("trainId")[5] == "pole" and cm.classes("trainId")[13] == "car"
        assert len(cm.classes("id")) == 34

    def test_collisions_found_at_load_and_resolved_by_lowest_id(self):
        cm = load_colormap("cityscapes")
        got = {c.color: (sorted(lab.name for lab in c.labels), c.winner.name, c.how)
               for c in cm.collisions}
        assert got == {
            (0, 0, 0): (sorted(["unlabeled", "ego vehicle", "rectification border",
                                "out of roi", "static"]), "unlabeled", "lowest_id"),
            (153, 153, 153): (["pole", "polegroup"], "pole", "lowest_id"),
            (0, 0, 142): (["car", "license plate"], "car", "lowest_id"),
        }
        table = cm.color_table("trainId")
        assert table[(153, 153, 153)] == 5 and table[(0, 0, 142)] == 13
        assert table[(0, 0, 0)] == 255
        ids = cm.color_table("id")
        assert ids[(0, 0, 0)] == 0 and ids[(153, 153, 153)] == 17 and ids[(0, 0, 142)] == 26

    def test_rule_does_not_depend_on_label_order(self):
        cm = load_colormap("cityscapes")
        rev = colormaps.ColorMap("rev", tuple(reversed(cm.labels)))
        assert rev.color_table("trainId") == cm.color_table("trainId")
        assert rev.color_table("id") == cm.color_table("id")

    def test_user_override_wins(self):
        cm = load_colormap("cityscapes", resolve=["153,153,153=polegroup"])
        assert cm.color_table("trainId")[(153, 153, 153)] == 255
        assert cm.color_table("id")[(153, 153, 153)] == 18
        cm2 = load_colormap("cityscapes").with_options(resolve={"#00008e": "license plate"})
        assert cm2.color_table("trainId")[(0, 0, 142)] == 255

    def test_error_rule_lists_only_real_conflicts(self):
        cm = load_colormap("cityscapes", collision_rule="error")
        with pytest.raises(ColorMapError, match=r"2 shared colour\(s\) map to different "
                           r"trainId") as exc:
            cm.color_table("trainId")
        assert "(153, 153, 153)" in str(exc.value) and "(0, 0, 142)" in str(exc.value)
        assert "(0, 0, 0)" not in str(exc.value)  # all black labels are trainId 255
        with pytest.raises(ColorMapError, match=r"3 shared colour"):
            cm.color_table("id")
        fixed = cm.with_options(resolve=["153,153,153=pole", "0,0,142=car"])
        assert fixed.color_table("trainId")[(153, 153, 153)] == 5

    @pytest.mark.parametrize("resolve, match", [
        (["1,2,3=car"], "used by 0 label"),
        (["0,0,142=truck"], "pick one of those"),
        (["128,64,128=road"], "used by 1 label"),
        (["0,0,142"], "must be 'R,G,B=label'"),
    ])
    def test_bad_overrides(self, resolve, match):
        with pytest.raises(ColorMapError, match=match):
            load_colormap("cityscapes", resolve=resolve)


def test_voc_palette():
    cm = load_colormap("voc")
    assert cm.indexed and cm.reads_palette_as_ids
    assert [lab.id for lab in cm.labels] == [*range(21), 255]
    for lab in cm.labels:
        assert lab.color == voc_color(lab.id), lab.name
    assert cm.label("person").id == 15 and cm.label("boundary").color == (224, 224, 192)
    assert not cm.collisions
    assert cm.classes("trainId")[0] == "background" and len(cm.classes("trainId")) == 21
    assert cm.value(cm.label("boundary"), "trainId") == 255


def test_custom_csv(tmp_path):
    p = tmp_path / "mine.csv"
    p.write_text("# my labels\nname,id,trainId,r,g,b,category\n"
                 "void,0,255,0,0,0,void\nroad,1,0,128,64,128,flat\n"
                 "lane,2,,255,255,255,flat\nkerb,3,0,,,,flat\n")
    cm = load_colormap(p)
    assert cm.name == "mine"
    assert cm.label("lane").train_id == 2  # empty trainId = id
    assert cm.label("kerb").color is None
    assert cm.color_table("trainId") == {(0, 0, 0): 255, (128, 64, 128): 0, (255, 255, 255): 2}
    assert cm.id_table("trainId") == {0: 255, 1: 0, 2: 2, 3: 0}
    assert cm.classes("trainId") == ["road", "unused_1", "lane"]


def test_custom_yaml_with_options(tmp_path):
    p = tmp_path / "camvid.yaml"
    p.write_text("name: camvid\nignore_index: 0\ncollision_rule: error\n"
                 "resolve: {'#808080': pole}\nlabels:\n"
                 "  - {name: void, id: 0, trainId: 0, color: '#000000'}\n"
                 "  - {name: pole, id: 1, trainId: 1, color: [128, 128, 128]}\n"
                 "  - {name: signpole, id: 2, trainId: 2, color: '128,128,128'}\n")
    cm = load_colormap(p)
    assert cm.ignore_index == 0
    assert cm.color_table("trainId") == {(0, 0, 0): 0, (128, 128, 128): 1}


@pytest.mark.parametrize("labels, match", [
    ("  - {name: a, id: 1, colour: [1, 2]}\n", "is not a colour"),
    ("  - {name: a, id: 1, trainid: 3}\n", r"unknown field\(s\) \['trainid'\]"),
    ("  - {name: a, id: 300}\n", "id 300 must be -1..255"),
    ("  - {name: a, id: 1}\n  - {name: b, id: 1}\n", "id 1 is used by both 'a' and 'b'"),
    ("  - {name: a, id: 1}\n  - {name: a, id: 2}\n", "name 'a' appears twice"),
    ("  - {name: a}\n", "needs a name and an id"),
])
def test_invalid_maps_name_the_problem(tmp_path, labels, match):
    p = tmp_path / "bad.yaml"
    p.write_text("labels:\n" + labels)
    with pytest.raises(ColorMapError, match=match):
        load_colormap(p)


def test_unknown_reference():
    with pytest.raises(ColorMapError, match="neither a built-in"):
        load_colormap("cityscape")


def test_id_map_and_train_id_override():
    cm = colormaps.colormap_from_id_map({7: 0, 8: 1, 0: 255})
    assert cm.id_table("trainId") == {0: 255, 7: 0, 8: 1}
    city = load_colormap("cityscapes").with_train_ids({7: 0, 26: 1})
    assert city.id_table("trainId")[26] == 1 and city.id_table("trainId")[8] == 255
    assert city.classes("trainId") == ["road", "car"]
    with pytest.raises(ColorMapError, match=r"ids \[99\]"):
        load_colormap("cityscapes").with_train_ids({99: 0})


def test_classes_document():
    doc = colormaps.classes_document(load_colormap("cityscapes"), "trainId")
    assert doc["num_classes"] == 19 and doc["ignore_index"] == 255
    assert doc["ids"]["road"] == 0 and doc["colors"][0] == [128, 64, 128]
    assert doc["target"] == "trainId" and doc["colormap"] == "cityscapes"


def test_target_value_rules():
    lab = LabelDef("x", 5, -1)
    assert colormaps.target_value(lab, "trainId", 255) == 255
    assert colormaps.target_value(lab, "id", 255) == 5
