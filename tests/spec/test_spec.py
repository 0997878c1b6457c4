"""Dataset specs: the shipped ones load; invalid ones fail naming the field and the fix."""

from __future__ import annotations

import pytest

from recforge.spec import SpecError, load_all_specs, load_spec, parse_spec

BASE = {"name": "pets", "source": {"uri": "s3://bkt/raw"}, "publish": {"uri": "s3://bkt/pub"}}


def test_shipped_specs_load():
    specs = load_all_specs()
    assert "demo_classification" in {s.name for s in specs}
    demo = next(s for s in specs if s.name == "demo_classification")
    assert demo.dag_id == "recforge__demo_classification"
    assert demo.staging == "s3://recforge-demo/datasets/_staging"
    assert demo.schedule is None  # demo data never changes: runs only when triggered


def test_defaults():
    spec = parse_spec(BASE)
    assert spec.pack.resize == 256 and spec.pack.encoding == ".jpg"
    assert spec.schedule == "0 2 * * *" and spec.splits.val_ratio == 0.1


@pytest.mark.parametrize("patch, field, words", [
    ({"name": "Bad Name"}, "name", "lowercase"),
    ({"sorce": {}}, "sorce", "unknown field"),
    ({"splits": {"val_ratio": 0.6, "test_ratio": 0.5}}, "splits", "no training data"),
    ({"pack": {"quality": 101}}, "pack.quality", "less than or equal to 100"),
    ({"pack": {"encoding": ".gif"}}, "pack.encoding", "'.jpg'"),
    ({"source": {"uri": "s3://bkt/raw", "extensions": []}}, "source.extensions", "at least one"),
])
def test_invalid_spec_names_field_and_fix(patch, field, words):
    with pytest.raises(SpecError) as exc:
        parse_spec({**BASE, **patch}, origin="x.yaml")
    msg = str(exc.value)
    assert "x.yaml" in msg and f"{field}:" in msg and words in msg


def test_missing_required_field(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("name: pets\nsource: {uri: s3://bkt/raw}\n")
    with pytest.raises(SpecError, match=r"publish: required field is missing"):
        load_spec(p)


def test_bad_yaml(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("name: [unclosed\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_spec(p)


def test_overrides_are_revalidated():
    spec = parse_spec(BASE)
    assert spec.with_overrides({"pack.resize": 128, "source.uri": None}).pack.resize == 128
    with pytest.raises(SpecError, match="pack.resize"):
        spec.with_overrides({"pack.resize": -1})


def test_segmentation_defaults_follow_the_task_but_keep_explicit_values():
    seg = {**BASE, "task": "segmentation", "source": {"uri": "s3://bkt/raw", "pairs": {}},
           "segmentation": {"colormap": "voc"}}
    spec = parse_spec(seg)
    assert spec.bench.options.loader == "segmentation"
    assert spec.quality.loader.value_range == (-2.2, 2.7)
    assert spec.with_overrides({"pack.resize": 128}).bench.options.loader == "segmentation"
    explicit = parse_spec({**seg, "bench": {"options": {"loader": "image_record_iter"}}})
    assert explicit.bench.options.loader == "image_record_iter"
    assert explicit.quality.loader.value_range == (0.0, 255.0)
    assert parse_spec(BASE).bench.options.loader == "image_record_iter"


def test_shard_size_is_a_count_or_auto():
    assert parse_spec(BASE).pack.shard_size == 500  # fixed by default: boundaries stay put
    auto = parse_spec({**BASE, "pack": {"shard_size": "auto"}})
    assert auto.pack.shard_size == "auto"
    for bad in (0, 1_000_001, "big"):
        with pytest.raises(SpecError, match="pack.shard_size"):
            parse_spec({**BASE, "pack": {"shard_size": bad}}, origin="x.yaml")
