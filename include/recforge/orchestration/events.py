"""The S3-event watcher: the trigger an ``s3_events`` schedule's Asset is watched with.

Objects landing under the source prefix make S3 send event notifications to an SQS queue
(docs/operations.md); the triggerer runs :class:`S3EventsTrigger` on that queue, and each
batch of messages it reads becomes one event of the Asset the DAG is scheduled on, so one run
follows a burst of uploads (the scheduler folds the events that arrive while a run is active
into the next one). Every message counts, the bucket's ``s3:TestEvent`` included: an event
that finds nothing changed ends in the cheap no-change run, and a message the watcher left in
the queue would come back after every visibility timeout.

The reading is the amazon provider's: ``SqsSensorTrigger.poke`` receives, and deletes what it
received. Only the transport differs: the provider's trigger talks through aiobotocore, which
has no release for the botocore that the deployment's boto3 pins, so here the hook's boto3
client makes the calls, each in a worker thread (SQS long polling: a message is returned as
soon as it arrives). That is also why this is not the common.messaging provider's
``MessageQueueTrigger``: it hands the queue to that same aiobotocore trigger.

The DAG file imports this module at parse time: Airflow's trigger base class only; boto3 and
the provider's hook are imported where the trigger runs, in the triggerer.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import unquote_plus

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from recforge.spec.schedule import queue_region

WAIT_SECONDS = 10  # one long poll: SQS answers as soon as a message is there
PAUSE_SECONDS = 5  # between two empty long polls
MAX_OBJECTS = 100  # the objects an event names; the rest are counted


def _call_in_thread(client):
    """``client``'s methods as coroutines that run the blocking boto3 call in a thread: what
    the provider's ``poke`` awaits."""
    class Threaded:
        def __getattr__(self, name: str):
            method = getattr(client, name)

            async def call(**kwargs):
                return await asyncio.to_thread(method, **kwargs)

            return call

    return Threaded()


def event_payload(queue: str, messages: list[dict]) -> dict[str, Any]:
    """What the Asset event says (its ``extra``): the queue, how many messages, and the
    ``s3://`` objects their S3 event records name (the first ``MAX_OBJECTS``)."""
    objects, events = [], set()
    for message in messages:
        try:
            body = json.loads(message.get("Body") or "")
        except ValueError:
            continue
        if not isinstance(body, dict):
            continue
        records = body.get("Records")
        if body.get("Event"):  # s3:TestEvent, sent when the notification is configured
            events.add(body["Event"])
        for record in records if isinstance(records, list) else ():
            s3 = record.get("s3", {})
            events.add(record.get("eventName", "?"))
            objects.append(f"s3://{s3.get('bucket', {}).get('name')}/"
                           f"{unquote_plus(s3.get('object', {}).get('key', ''))}")
    return {"status": "success", "queue_url": queue, "messages": len(messages),
            "events": sorted(events), "objects": objects[:MAX_OBJECTS],
            "more_objects": max(0, len(objects) - MAX_OBJECTS)}


class S3EventsTrigger(BaseEventTrigger):
    """Waits for messages on an SQS queue (S3 event notifications) and fires once per batch.

    ``aws_conn_id`` is the spec's; ``None`` means the deployment's ``[recforge] aws_conn_id``,
    resolved in the triggerer (``connections.conn_id_for``), else ``aws_default``; a
    connection that does not exist leaves boto3's own configuration in charge. The region is
    the one an AWS queue URL names, else the connection's."""

    def __init__(self, queue_url: str, aws_conn_id: str | None = None,
                 wait_seconds: int = WAIT_SECONDS, pause_seconds: int = PAUSE_SECONDS) -> None:
        super().__init__()
        self.queue_url = queue_url
        self.aws_conn_id = aws_conn_id
        self.wait_seconds = wait_seconds
        self.pause_seconds = pause_seconds

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"queue_url": self.queue_url, "aws_conn_id": self.aws_conn_id,
                 "wait_seconds": self.wait_seconds, "pause_seconds": self.pause_seconds})

    def sqs_trigger(self):
        """The provider's trigger for this queue, whose ``poke`` reads it."""
        from airflow.providers.amazon.aws.triggers.sqs import SqsSensorTrigger

        from recforge.orchestration.connections import conn_id_for

        return SqsSensorTrigger(
            sqs_queue=self.queue_url, aws_conn_id=conn_id_for(self.aws_conn_id),
            region_name=queue_region(self.queue_url), max_messages=10,
            wait_time_seconds=self.wait_seconds, waiter_delay=self.pause_seconds)

    def _connect(self):
        sqs = self.sqs_trigger()
        return sqs, sqs.hook.get_conn()

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from asgiref.sync import sync_to_async

        # the provider's import (boto3) and the connection's lookup block: off the event
        # loop, as the provider's own triggers look connections up
        sqs, client = await sync_to_async(self._connect)()
        client = _call_in_thread(client)
        self.log.info("waiting for S3 event notifications on %s", self.queue_url)
        while True:
            messages = await sqs.poke(client)
            if messages:
                yield TriggerEvent(event_payload(self.queue_url, messages))
                return
            await asyncio.sleep(self.pause_seconds)
