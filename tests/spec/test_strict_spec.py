"""The spec refuses what it should: bad cron, bad or overlapping URIs, loose bool/int
scalars, a bomb guard switched off, duplicate YAML keys — each naming the field."""

from __future__ import annotations

import pytest

from recforge.spec import SpecError, load_spec, parse_spec

BASE = {"name": "d", "source": {"uri": "s3://bucket/raw"},
        "publish": {"uri": "s3://bucket/datasets"}}


def _with(**changes) -> dict:
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in BASE.items()}
    for dotted, value in changes.items():
        node = data
        *parents, leaf = dotted.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return data


@pytest.mark.parametrize("changes, message", [
    ({"schedule": "every day at two"}, "schedule: .*not a 5-field cron"),
    ({"schedule": "99 2 * * *"}, "not a 5-field cron"),
    ({"schedule": "0 0 * * * *"}, "not a 5-field cron"),
    ({"source__uri": ""}, "source.uri: .*neither s3://bucket/prefix nor an absolute path"),
    ({"source__uri": "s3://"}, "no valid bucket name"),
    ({"publish__uri": "relative/dir"}, "publish.uri: .*absolute path"),
    ({"publish__uri": "s3://bucket/raw/out"}, "publish.uri .* overlap"),
    ({"publish__uri": "s3://bucket"}, "overlap"),
    ({"staging_uri": "s3://bucket/raw/_staging"}, "staging .* overlap"),
    ({"pack__max_pixels": 1e40}, "pack.max_pixels: "),
    ({"pack__max_pixels": 5_000_000_000}, "pack.max_pixels: .*less than or equal to 4000000000"),
    ({"pack__quality": True}, "quality: True is a boolean"),
    ({"pack__upscale": 1}, "upscale: 1 is not true or false"),
    ({"labels__allow_renumbering": "yes"}, "allow_renumbering: 'yes' is not true or false"),
])
def test_refused(changes, message):
    with pytest.raises(SpecError, match=message):
        parse_spec(_with(**changes))


@pytest.mark.parametrize("schedule", [None, "@daily", "@once", "*/15 3-5 * * 1-5", "0 2 * * *"])
def test_accepted_schedules(schedule):
    assert parse_spec(_with(schedule=schedule)).schedule == schedule


def test_local_paths_and_separate_prefixes_are_fine(tmp_path):
    spec = parse_spec({"name": "d", "source": {"uri": str(tmp_path / "src")},
                       "publish": {"uri": f"file://{tmp_path / 'pub'}"}})
    assert spec.pack.quality == 95 and spec.pack.upscale is False


def test_duplicate_yaml_keys_are_an_error(tmp_path):
    f = tmp_path / "d.yaml"
    f.write_text("name: d\nsource: {uri: 's3://bucket/raw'}\npublish: {uri: 's3://bucket/p'}\n"
                 "pack:\n  resize: 128\n  resize: 256\n")
    with pytest.raises(SpecError, match="duplicate key 'resize'"):
        load_spec(f)


@pytest.mark.parametrize("section, typo, known", [
    ({}, {"qualty": {}}, "known here: alerts, aws_conn_id, bench"),
    ({"splits": {"form": "source"}}, {}, "known here: folders, from, seed, test_ratio"),
    ({"source": {"uri": "s3://bkt/raw", "layuot": "voc"}}, {}, "known here: allowed, columns"),
])
def test_an_unknown_key_anywhere_names_the_known_ones(section, typo, known):
    from recforge.errors import SpecError
    from recforge.spec import parse_spec

    doc = {"name": "x", "source": {"uri": "s3://bkt/raw"}, "publish": {"uri": "s3://bkt/p"},
           **section, **typo}
    with pytest.raises(SpecError, match=known):
        parse_spec(doc)
