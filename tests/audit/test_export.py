"""Sealed periods go to S3 as JSON Lines plus their signed checkpoint (against moto)."""

from __future__ import annotations

import json
from io import StringIO

import boto3
import pytest
from django.core.management import CommandError, call_command
from moto import mock_aws

from audit.lib import chain
from audit.models import AuditCheckpoint, AuditEvent, AuditExport
from audit.services import audit_chain_seal
from audit.services.export import audit_export_pending, export_keys
from audit.tasks import export_audit_log
from tests.audit.conftest import make_events

pytestmark = pytest.mark.django_db
BUCKET = "portal-audit-archive"


@pytest.fixture
def s3(settings, monkeypatch):
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    settings.PORTAL_AUDIT_S3_BUCKET = BUCKET
    settings.PORTAL_AUDIT_S3_PREFIX = "audit/"
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


def objects(client) -> dict[str, bytes]:
    listing = client.list_objects_v2(Bucket=BUCKET).get("Contents", [])
    return {
        item["Key"]: client.get_object(Bucket=BUCKET, Key=item["Key"])["Body"].read()
        for item in listing
    }


@pytest.fixture
def two_periods():
    make_events(12)
    audit_chain_seal()
    make_events(3, method="DELETE", status=204)
    audit_chain_seal()
    return list(AuditCheckpoint.objects.order_by("number"))


def test_each_period_is_written_as_json_lines_with_its_checkpoint(s3, two_periods):
    assert audit_export_pending() == 2
    stored = objects(s3)
    first = two_periods[0]
    events_key, checkpoint_key = export_keys(first)
    assert events_key == f"audit/{first.period_end:%Y/%m/%d}/checkpoint-000000000001.events.jsonl"
    assert set(stored) == {*export_keys(two_periods[0]), *export_keys(two_periods[1])}
    lines = [json.loads(line) for line in stored[events_key].decode().splitlines()]
    assert [line["position"] for line in lines] == list(range(1, 13))
    assert lines[0]["event"]["path"] == "/api/v1/instance-types/?page=0"
    document = json.loads(stored[checkpoint_key])
    assert (document["number"], document["event_count"]) == (1, 12)
    assert document["signature"] == first.signature


def test_an_exported_period_verifies_without_the_database(s3, two_periods):
    audit_export_pending()
    stored = objects(s3)
    previous_head = chain.GENESIS
    for checkpoint in two_periods:
        events_key, checkpoint_key = export_keys(checkpoint)
        head = previous_head
        for line in stored[events_key].decode().splitlines():
            row = json.loads(line)
            values = [row["event"][name] for name in chain.CONTENT_FIELDS]
            content = json.dumps(values, ensure_ascii=False, separators=(",", ":")).encode()
            assert row["prev_hash"] == head
            head = chain.link_hash(head, row["seq"], content)
            assert head == row["hash"]
        document = json.loads(stored[checkpoint_key])
        assert document["head_hash"] == head
        previous_head = head


def test_exporting_again_overwrites_the_same_keys(s3, two_periods):
    audit_export_pending()
    before = objects(s3)
    assert audit_export_pending() == 0
    call_command("audit_export", "--checkpoint", "1", "--checkpoint", "2", stdout=StringIO())
    assert objects(s3) == before
    assert AuditExport.objects.count() == 2


def test_export_records_what_it_did_as_a_system_row(s3, two_periods):
    export_audit_log()
    row = AuditEvent.objects.get(actor_username="system:audit.export")
    assert (row.method, row.action, row.actor_role) == ("TASK", "audit.export", "system")
    assert json.loads(row.body_summary) == {"bucket": BUCKET, "periods": 2}


def test_with_no_bucket_export_is_off(settings, two_periods):
    settings.PORTAL_AUDIT_S3_BUCKET = ""
    assert audit_export_pending() == 0
    with pytest.raises(CommandError, match="S3 export is off"):
        call_command("audit_export", stdout=StringIO())


def test_exporting_an_unknown_checkpoint_says_so(s3, two_periods):
    with pytest.raises(CommandError, match="no checkpoint 9"):
        call_command("audit_export", "--checkpoint", "9", stdout=StringIO())
