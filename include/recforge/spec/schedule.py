"""When a dataset rebuilds: the spec's ``schedule``, a clock or events.

A cron string (or preset) is the clock, ``null`` is manual runs only, and a mapping schedules
the DAG on events: another Asset's updates (``asset``, e.g. another recforge dataset's
``recforge/<name>``), the source prefix's S3 event notifications delivered to an SQS queue
(``s3_events``), and optionally a clock beside them (``cron``). A run starts when any of
them fires: a dataset built from two upstreams is stale as soon as either changes, and an
event that finds nothing changed ends in the cheap no-change run. How the DAG is scheduled
from this is ``recforge.orchestration.dags.dag_schedule``; nothing here imports Airflow.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from recforge.spec.base import StrictModel

CRON_PRESETS = ("@once", "@continuous", "@hourly", "@daily", "@weekly", "@monthly",
                "@quarterly", "@yearly", "@annually")
# presets that are a clock: @once and @continuous are not, so they cannot sit beside events
CLOCK_PRESETS = CRON_PRESETS[2:]
# what a recforge dataset's publish task updates: recforge/<name>
DATASET_ASSET_RE = re.compile(r"^recforge/(?P<name>[^/]+)$")
# an SQS queue URL: https://sqs.<region>.amazonaws.com/<account>/<queue> on AWS, or the same
# path on an SQS-compatible server (http://127.0.0.1:5000/123456789012/<queue>)
SQS_QUEUE_RE = re.compile(r"^https?://(?P<host>[A-Za-z0-9.\-]+)(:\d{1,5})?"
                          r"/\d{12}/[A-Za-z0-9_\-]{1,80}$")
SQS_AWS_HOST_RE = re.compile(r"^sqs\.(?P<region>[a-z0-9\-]+)\.amazonaws\.com(\.cn)?$")
QUEUE_EXAMPLE = "https://sqs.eu-west-1.amazonaws.com/123456789012/recforge-pets-events"


def check_cron(v: str, field: str, presets: tuple[str, ...] = CRON_PRESETS) -> str:
    """A 5-field cron expression or one of ``presets``; else a message that says which."""
    if v in presets:
        return v
    from croniter import croniter

    if len(v.split()) != 5 or not croniter.is_valid(v):
        raise ValueError(f"{field} {v!r} is not a 5-field cron expression (e.g. "
                         f"'0 2 * * *') or one of {', '.join(presets)}; null = "
                         "manual runs only")
    return v


def queue_region(queue: str) -> str | None:
    """The AWS region an ``sqs.<region>.amazonaws.com`` queue URL names; None elsewhere (an
    SQS-compatible server: the connection's or boto3's region applies)."""
    match = SQS_QUEUE_RE.match(queue)
    aws = SQS_AWS_HOST_RE.match(match["host"]) if match else None
    return aws["region"] if aws else None


class S3EventsSpec(StrictModel):
    """The source prefix's object events: S3 event notifications sent to an SQS queue."""

    queue: str = Field(
        description="the URL of the SQS queue the bucket's event notifications for the "
        f"source prefix go to ({QUEUE_EXAMPLE}; docs/operations.md shows the notification "
        "configuration). One queue per dataset: the DAG's watcher deletes what it reads")
    conn_id: str | None = Field(
        None, description="the Airflow AWS connection the triggerer reads the queue with; "
        "default: the spec's aws_conn_id, else [recforge] aws_conn_id, else aws_default "
        "(without such a connection, boto3's own configuration)")

    @field_validator("queue")
    @classmethod
    def _queue_ok(cls, v: str) -> str:
        if v.startswith("arn:"):
            raise ValueError(f"schedule.s3_events.queue {v!r} is the queue's ARN; write its "
                             f"URL (the SQS console's 'URL', e.g. {QUEUE_EXAMPLE})")
        if v.endswith(".fifo"):
            raise ValueError(f"schedule.s3_events.queue {v!r} is a FIFO queue; S3 sends event "
                             "notifications to standard queues only: create a standard one")
        if not SQS_QUEUE_RE.match(v):
            raise ValueError(f"schedule.s3_events.queue {v!r} is not an SQS queue URL: write "
                             f"https://sqs.<region>.amazonaws.com/<12-digit account>/<queue> "
                             f"as the SQS console shows it, e.g. {QUEUE_EXAMPLE}")
        return v


class EventSchedule(StrictModel):
    """A schedule on events: a run starts when any of them fires (or the clock, if set)."""

    asset: tuple[str, ...] | None = Field(
        None, description="an Airflow Asset, or a list of them (any one's update starts a "
        "run): another recforge dataset's is recforge/<name>; a name with '://' is an "
        "Asset URI")
    s3_events: S3EventsSpec | None = Field(
        None, description="objects landing under the source prefix start a run (S3 event "
        "notifications to an SQS queue)")
    cron: str | None = Field(
        None, description="also on this clock (cron or @hourly..@yearly, UTC), whichever "
        "comes first")

    @field_validator("asset", mode="before")
    @classmethod
    def _one_or_many(cls, v):
        return (v,) if isinstance(v, str) else v

    @field_validator("asset")
    @classmethod
    def _assets_ok(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("schedule.asset is an empty list: name at least one Asset "
                             "(recforge/<name> for another dataset), or leave it out")
        for name in v:
            if not name.strip() or name != name.strip() or len(name) > 1500:
                raise ValueError(f"schedule.asset {name!r} is not an Asset name: 1 to 1500 "
                                 "characters, no leading or trailing blanks")
            dataset = DATASET_ASSET_RE.match(name)
            if dataset and not re.fullmatch(r"[a-z0-9][a-z0-9_\-]{0,62}", dataset["name"]):
                raise ValueError(f"schedule.asset {name!r}: {dataset['name']!r} is not a "
                                 "dataset name; another dataset's Asset is recforge/<its name>")
        return v

    @field_validator("cron")
    @classmethod
    def _cron_ok(cls, v: str | None) -> str | None:
        return None if v is None else check_cron(v, "schedule.cron", CLOCK_PRESETS)

    @model_validator(mode="after")
    def _some_event(self) -> EventSchedule:
        if not self.asset and self.s3_events is None:
            raise ValueError("schedule names no event: give asset: recforge/<name> and/or "
                             "s3_events: {queue: <SQS queue URL>} (a clock alone is the cron "
                             "string itself, schedule: '0 2 * * *')")
        return self


def _kind(v) -> str:
    return "mapping" if isinstance(v, dict | EventSchedule) else "cron string"


# the spec's ``schedule``: a cron string or a mapping of events, told apart by their type so
# an error names only the shape that was written
Schedule = Annotated[Annotated[str, Tag("cron string")]
                     | Annotated[EventSchedule, Tag("mapping")], Discriminator(_kind)]
# the tags above in an error's path: not fields, so the messages leave them out
SCHEDULE_TAGS = ("cron string", "mapping")
