"""``schedule``: a cron string and null as always, or events — upstream Assets, the source's
S3 event notifications on an SQS queue, a clock beside them — each refused shape naming the
field and the fix."""

from __future__ import annotations

import pytest

from recforge.spec import SpecError, parse_spec
from recforge.spec.schedule import EventSchedule, queue_region

BASE = {"name": "b", "source": {"uri": "s3://bucket/raw"},
        "publish": {"uri": "s3://bucket/datasets"}}
QUEUE = "https://sqs.eu-west-1.amazonaws.com/123456789012/recforge-b-events"


def _schedule(value):
    return parse_spec({**BASE, "schedule": value}).schedule


@pytest.mark.parametrize("value", [None, "0 2 * * *", "@daily", "*/15 3-5 * * 1-5"])
def test_cron_strings_and_null_stay_as_they_are(value):
    assert _schedule(value) == value


def test_the_default_is_still_the_nightly_cron():
    assert parse_spec(BASE).schedule == "0 2 * * *"


def test_one_upstream_asset_is_a_list_of_one():
    assert _schedule({"asset": "recforge/a"}) == EventSchedule(asset=("recforge/a",))


def test_several_assets_by_name_or_uri_and_a_clock_beside_them():
    s = _schedule({"asset": ["recforge/a", "s3://other/datasets/c"], "cron": "@daily"})
    assert s.asset == ("recforge/a", "s3://other/datasets/c") and s.cron == "@daily"
    assert s.s3_events is None


def test_s3_events_on_a_queue_with_the_connection_optional():
    s = _schedule({"s3_events": {"queue": QUEUE}})
    assert s.s3_events.queue == QUEUE and s.s3_events.conn_id is None and s.asset is None
    s = _schedule({"s3_events": {"queue": QUEUE, "conn_id": "aws_events"}})
    assert s.s3_events.conn_id == "aws_events"


def test_an_sqs_compatible_server_queue_url_is_a_queue_url_too():
    local = "http://127.0.0.1:5000/123456789012/recforge-b-events"
    assert _schedule({"s3_events": {"queue": local}}).s3_events.queue == local


def test_the_region_comes_from_an_aws_queue_url_only():
    assert queue_region(QUEUE) == "eu-west-1"
    assert queue_region("https://sqs.cn-north-1.amazonaws.com.cn/123456789012/q") == \
        "cn-north-1"
    assert queue_region("http://127.0.0.1:5000/123456789012/q") is None


def test_an_event_schedule_survives_overrides_and_the_json_dump():
    spec = parse_spec({**BASE, "schedule": {"asset": "recforge/a",
                                            "s3_events": {"queue": QUEUE}}})
    assert spec.with_overrides({"pack.resize": 64}).schedule == spec.schedule
    assert spec.public_dump()["schedule"] == {
        "asset": ["recforge/a"], "s3_events": {"queue": QUEUE, "conn_id": None}, "cron": None}


@pytest.mark.parametrize("value, message", [
    ("every day at two", r"schedule: schedule 'every day at two' is not a 5-field cron"),
    (5, r"schedule: Input should be a valid string"),
    ({"asset": []}, r"schedule.asset: .*empty list: name at least one Asset"),
    ({"asset": "recforge/Not A Name"}, r"'Not A Name' is not a dataset name; another "
                                       r"dataset's Asset is recforge/<its name>"),
    ({"asset": " recforge/a"}, r"no leading or trailing blanks"),
    ({"cron": "@daily"}, r"schedule: schedule names no event: give asset: .*\(a clock alone "
                         r"is the cron string itself"),
    ({"asset": "recforge/a", "cron": "@once"}, r"schedule.cron: .*'@once' is not a 5-field"),
    ({"asset": "recforge/a", "cron": "61 * * * *"}, r"schedule.cron: .*not a 5-field cron"),
    ({"asset": "recforge/b"}, r"recforge/b is this dataset's own Asset"),
    ({"assets": ["recforge/a"]}, r"schedule.assets: unknown field; .*known here: asset, "
                                 r"cron, s3_events"),
    ({"s3_events": {}}, r"schedule.s3_events.queue: required field is missing"),
    ({"s3_events": {"queue": QUEUE, "conn": "x"}}, r"schedule.s3_events.conn: unknown field"),
    ({"s3_events": {"queue": "arn:aws:sqs:eu-west-1:123456789012:q"}},
     r"is the queue's ARN; write its URL"),
    ({"s3_events": {"queue": QUEUE + ".fifo"}}, r"is a FIFO queue; S3 sends event "
                                                r"notifications to standard queues only"),
    ({"s3_events": {"queue": "recforge-b-events"}},
     r"is not an SQS queue URL: write https://sqs.<region>.amazonaws.com/<12-digit account>"),
    ({"s3_events": {"queue": "https://sqs.eu-west-1.amazonaws.com/recforge-b-events"}},
     r"is not an SQS queue URL"),
])
def test_a_bad_schedule_is_refused_naming_the_field_and_the_fix(value, message):
    with pytest.raises(SpecError, match=message):
        _schedule(value)


def test_s3_events_need_an_s3_source():
    with pytest.raises(SpecError, match=r"s3_events needs an s3:// source; /data/raw is a "
                                        r"local path"):
        parse_spec({**BASE, "source": {"uri": "/data/raw"},
                    "schedule": {"s3_events": {"queue": QUEUE}}})
