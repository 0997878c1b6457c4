"""S3 event notifications to an SQS queue on the test's moto server, configured as
docs/operations.md tells a deployment to (a queue configuration filtered on the source
prefix): what an ``s3_events`` schedule reads."""

from __future__ import annotations

import uuid

import boto3

from recforge.dev import s3server

REGION = s3server.DEV_CREDENTIALS["AWS_DEFAULT_REGION"]


def clients(endpoint: str):
    """(sqs, s3) boto3 clients of the server at ``endpoint``."""
    return (boto3.client("sqs", endpoint_url=endpoint, region_name=REGION),
            boto3.client("s3", endpoint_url=endpoint, region_name=REGION))


def notifying_queue(endpoint: str, bucket: str, prefix: str) -> str:
    """A new queue that the existing ``bucket`` sends its ObjectCreated events under
    ``prefix`` to; returns the queue URL. The queue starts empty: the ``s3:TestEvent`` that
    S3 sends when the configuration is put is purged."""
    sqs, s3 = clients(endpoint)
    url = sqs.create_queue(QueueName=f"events-{uuid.uuid4().hex[:10]}")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    s3.put_bucket_notification_configuration(Bucket=bucket, NotificationConfiguration={
        "QueueConfigurations": [{
            "Id": "recforge-source", "Events": ["s3:ObjectCreated:*"],
            "QueueArn": arn["Attributes"]["QueueArn"],
            "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": prefix}]}}}]})
    sqs.purge_queue(QueueUrl=url)
    return url


def waiting(endpoint: str, url: str) -> int:
    """The messages in the queue, in flight included."""
    attrs = clients(endpoint)[0].get_queue_attributes(
        QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]) + int(
        attrs["ApproximateNumberOfMessagesNotVisible"])
