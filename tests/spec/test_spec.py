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


KMS_KEY = "arn:aws:kms:eu-west-1:111122223333:key/abc"


def test_s3_write_options_default_to_none_and_staging_follows_publish(tmp_path):
    from recforge.run import write_options
    from recforge.storage import WriteOptions

    spec = parse_spec(BASE)
    assert spec.publish.s3.sse == "none" and spec.publish.s3.acl == "none"
    assert set(write_options(spec).values()) == {WriteOptions()}  # nothing is sent
    (tmp_path / "s.yaml").write_text(
        "name: pets\nsource: {uri: s3://bkt/raw}\n"
        "publish:\n  uri: s3://bkt/pub\n  s3:\n    sse: aws:kms\n"
        f"    kms_key_id: {KMS_KEY}\n    expected_bucket_owner: 111122223333\n"
        "    storage_class: STANDARD_IA\n"
        "staging_uri: s3://stage/tmp\nstaging_s3: {sse: AES256, expected_bucket_owner: "
        "'012345678901'}\n")
    spec = load_spec(tmp_path / "s.yaml")  # an unquoted account id is read as digits
    assert spec.publish.s3.expected_bucket_owner == "111122223333"
    assert spec.staging_options.sse == "AES256"
    options = write_options(spec)
    assert options["s3://bkt/pub"].kms_key_id == KMS_KEY
    assert options["s3://bkt/pub"].storage_class == "STANDARD_IA"
    assert options["s3://stage/tmp"].expected_bucket_owner == "012345678901"
    assert options["s3://stage/tmp"].kms_key_id is None
    inherit = parse_spec({**BASE, "publish": {"uri": "s3://bkt/pub", "s3": {"sse": "AES256"}}})
    assert inherit.staging_options == inherit.publish.s3
    assert write_options(inherit)["s3://bkt/pub/_staging"].sse == "AES256"


@pytest.mark.parametrize("s3, field, words", [
    ({"sse": "AES256", "kms_key_id": KMS_KEY}, "publish.s3", "only for sse aws:kms"),
    ({"kms_key_id": KMS_KEY}, "publish.s3", "only for sse aws:kms"),
    ({"expected_bucket_owner": "12345"}, "publish.s3.expected_bucket_owner", "12 digits"),
    ({"expected_bucket_owner": 12345678901}, "publish.s3.expected_bucket_owner",
     "leading zeros"),
    ({"storage_class": "GLACIER"}, "publish.s3.storage_class", "restored"),
    ({"storage_class": "standard"}, "publish.s3.storage_class", "not one of S3's"),
    ({"sse": "aws:kms", "kms_key_id": " "}, "publish.s3.kms_key_id", "no KMS key"),
    ({"sse": "kms"}, "publish.s3.sse", "'aws:kms'"),
    ({"acl": "public-read"}, "publish.s3.acl", "'bucket-owner-full-control'"),
    ({"encryption": "aws:kms"}, "publish.s3.encryption", "known here: acl, "),
])
def test_invalid_s3_write_options_name_the_field(s3, field, words):
    with pytest.raises(SpecError) as exc:
        parse_spec({**BASE, "publish": {"uri": "s3://bkt/pub", "s3": s3}}, origin="x.yaml")
    msg = str(exc.value)
    assert f"{field}:" in msg and words in msg, msg


def test_a_shared_bucket_has_one_expected_owner():
    with pytest.raises(SpecError, match="two expected owners"):
        parse_spec({**BASE, "publish": {"uri": "s3://bkt/pub", "s3": {
            "expected_bucket_owner": "111122223333"}}, "staging_uri": "s3://bkt/stage",
            "staging_s3": {"expected_bucket_owner": "444455556666"}})
    spec = parse_spec({**BASE, "publish": {"uri": "s3://bkt/pub", "s3": {
        "expected_bucket_owner": "111122223333"}}, "staging_uri": "s3://other/stage",
        "staging_s3": {"expected_bucket_owner": "444455556666"}})
    assert spec.staging_options.expected_bucket_owner == "444455556666"
