"""The S3-event watcher against the real moto server: the bucket's own event notifications
for the source prefix land in an SQS queue, and the trigger an ``s3_events`` spec's DAG is
scheduled with reads them (through the Airflow connection, or boto3's own configuration) and
fires one event naming the objects, leaving the queue empty."""

from __future__ import annotations

import asyncio
import importlib
import json

import pytest

from recforge.dev import s3server
from recforge.orchestration.dags import source_events_asset
from recforge.orchestration.events import S3EventsTrigger, event_payload
from tests.common import sqs as events
from tests.common.sources import make_spec


def _first_event(trigger: S3EventsTrigger, timeout: float = 60):
    async def first():
        async for event in trigger.run():
            return event

    return asyncio.run(asyncio.wait_for(first(), timeout))


def _spec_trigger(bucket: str, queue: str, **events) -> S3EventsTrigger:
    """The trigger exactly as the DAG of a spec with this ``s3_events`` schedule holds it,
    rebuilt from its serialized form as the triggerer does."""
    spec = make_spec(bucket, schedule={"s3_events": {"queue": queue, **events}})
    (watcher,) = source_events_asset(spec).watchers
    path, kwargs = watcher.trigger.serialize()
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)(**kwargs)


@pytest.mark.parametrize("through", ["environment", "connection"])
def test_objects_landing_under_the_prefix_fire_one_event_naming_them(
        s3_endpoint, bucket, monkeypatch, through):
    queue = events.notifying_queue(s3_endpoint, bucket, "raw/")
    s3 = events.clients(s3_endpoint)[1]
    if through == "connection":  # the endpoint only in the connection, as in a deployment
        monkeypatch.setenv("AIRFLOW_CONN_AWS_EVENTS", json.dumps({
            "conn_type": "aws", "login": s3server.DEV_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "password": s3server.DEV_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            "extra": {"endpoint_url": s3_endpoint, "region_name": events.REGION}}))
        monkeypatch.delenv("AWS_ENDPOINT_URL")
    s3.put_object(Bucket=bucket, Key="raw/cat/new photo.jpg", Body=b"jpeg")
    s3.put_object(Bucket=bucket, Key="raw/dog/2.jpg", Body=b"jpeg")
    s3.put_object(Bucket=bucket, Key="elsewhere/3.jpg", Body=b"jpeg")  # outside the filter
    trigger = _spec_trigger(bucket, queue, **(
        {"conn_id": "aws_events"} if through == "connection" else {}))
    assert trigger.aws_conn_id == ("aws_events" if through == "connection" else None)

    event = _first_event(trigger)

    payload = event.payload
    assert payload["status"] == "success" and payload["queue_url"] == queue
    assert sorted(payload["objects"]) == [f"s3://{bucket}/raw/cat/new photo.jpg",
                                          f"s3://{bucket}/raw/dog/2.jpg"]
    assert payload["events"] == ["ObjectCreated:Put"] and payload["messages"] == 2
    assert events.waiting(s3_endpoint, queue) == 0  # read is deleted


def test_the_trigger_waits_while_the_queue_is_empty(s3_endpoint, bucket):
    queue = events.notifying_queue(s3_endpoint, bucket, "raw/")
    trigger = S3EventsTrigger(queue, wait_seconds=1, pause_seconds=1)
    with pytest.raises(TimeoutError):
        _first_event(trigger, timeout=4)


def test_the_serialized_trigger_is_this_class_with_the_spec_values():
    spec = make_spec("bkt", aws_conn_id="aws_s3", schedule={"s3_events": {
        "queue": "https://sqs.eu-west-1.amazonaws.com/123456789012/q"}})
    asset = source_events_asset(spec)
    assert (asset.name, asset.uri) == ("recforge/pets/s3_events",
                                       "https://sqs.eu-west-1.amazonaws.com/123456789012/q")
    (watcher,) = asset.watchers
    assert watcher.name == "recforge__pets__s3_events"
    path, kwargs = watcher.trigger.serialize()
    assert path == "recforge.orchestration.events.S3EventsTrigger"
    assert kwargs["queue_url"] == "https://sqs.eu-west-1.amazonaws.com/123456789012/q"
    assert kwargs["aws_conn_id"] == "aws_s3"  # the spec's S3 connection, unless it names one
    sqs = S3EventsTrigger(**kwargs).sqs_trigger()
    assert sqs.region_name == "eu-west-1" and sqs.max_messages == 10


def test_a_message_that_is_no_s3_event_still_counts():
    payload = event_payload("q", [{"Body": "not json"}, {"Body": json.dumps([1])},
                                  {"Body": json.dumps({"Event": "s3:TestEvent"})}])
    assert payload["messages"] == 3 and payload["objects"] == []
    assert payload["events"] == ["s3:TestEvent"]
