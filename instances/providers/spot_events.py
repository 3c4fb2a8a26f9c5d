"""EC2's spot interruption events as EventBridge delivers them to an SQS queue.

An EventBridge rule matching ``source: aws.ec2`` and the two detail-types below targets the queue
named by ``PORTAL_SPOT_EVENTS_QUEUE_URL``; the portal drains it (the queue mode of the AWS node
termination handler and Karpenter). The simulated cloud posts the same messages there when a
queue is configured, so one drain serves both clouds.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import boto3
from django.conf import settings

from instances.providers.base import SpotWarning

log = logging.getLogger(__name__)

INTERRUPTION = "EC2 Spot Instance Interruption Warning"
REBALANCE = "EC2 Instance Rebalance Recommendation"
KIND_OF = {INTERRUPTION: SpotWarning.INTERRUPTION, REBALANCE: SpotWarning.REBALANCE}
# EC2 acts about two minutes after the warning; the event itself carries no deadline.
EC2_WARNING_LEAD = timedelta(minutes=2)
# Messages read per receive (SQS allows at most 10) and receives per drain, so one drain task
# stays short however full the queue is; the next beat tick goes on.
BATCH = 10
MAX_BATCHES = 50


def event_body(warning: SpotWarning, *, region: str) -> str:
    """The EventBridge event for a warning, as the rule's SQS target receives it."""
    detail_type = INTERRUPTION if warning.kind == SpotWarning.INTERRUPTION else REBALANCE
    detail = {"instance-id": warning.cloud_id}
    if warning.kind == SpotWarning.INTERRUPTION:
        detail["instance-action"] = "terminate"
    return json.dumps(
        {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": detail_type,
            "source": "aws.ec2",
            "account": "000000000000",
            "time": warning.at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": region,
            "resources": [f"arn:aws:ec2:{region}:000000000000:instance/{warning.cloud_id}"],
            "detail": detail,
        }
    )


def parse_event(body: str) -> SpotWarning | None:
    """A warning from a queue message, or None for anything else (another event, a test
    message, garbage): such messages are dropped, never retried forever."""
    try:
        event = json.loads(body)
        kind = KIND_OF.get(event.get("detail-type"))
        cloud_id = event["detail"]["instance-id"]
        at = datetime.fromisoformat(event["time"].replace("Z", "+00:00")).astimezone(UTC)
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return None
    if kind is None or event.get("source") != "aws.ec2" or not isinstance(cloud_id, str):
        return None
    action_at = at + EC2_WARNING_LEAD if kind == SpotWarning.INTERRUPTION else None
    return SpotWarning(cloud_id=cloud_id[:64], kind=kind, at=at, action_at=action_at)


def _client():
    url = settings.PORTAL_SPOT_EVENTS_QUEUE_URL
    # The queue's region is in its URL (https://sqs.<region>.amazonaws.com/...); moto's is not.
    return boto3.client(
        "sqs",
        region_name=settings.PORTAL_REGION,
        endpoint_url=settings.PORTAL_SPOT_EVENTS_ENDPOINT_URL or None,
    ), url


def queue_configured() -> bool:
    return bool(settings.PORTAL_SPOT_EVENTS_QUEUE_URL)


def queue_send(warning: SpotWarning) -> None:
    """Post a warning as EventBridge would (the simulated cloud's side of the queue)."""
    client, url = _client()
    client.send_message(
        QueueUrl=url, MessageBody=event_body(warning, region=settings.PORTAL_REGION)
    )


def queue_drain() -> Iterator[tuple[SpotWarning | None, callable]]:
    """Yield each message's warning (None when it is not one) with a function that deletes the
    message. The caller deletes it once handled: a worker killed in between leaves it to come
    back after the visibility timeout, and handling a warning twice changes nothing."""
    client, url = _client()
    for _ in range(MAX_BATCHES):
        reply = client.receive_message(
            QueueUrl=url, MaxNumberOfMessages=BATCH, WaitTimeSeconds=0, VisibilityTimeout=60
        )
        messages = reply.get("Messages", [])
        if not messages:
            return
        for message in messages:
            handle = message["ReceiptHandle"]
            yield (
                parse_event(message.get("Body", "")),
                lambda handle=handle: client.delete_message(QueueUrl=url, ReceiptHandle=handle),
            )
