"""Retention deletes whole sealed periods older than the setting, and nothing else."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from audit.models import AuditChainLink, AuditCheckpoint, AuditEvent, AuditExport, AuditPrune
from audit.services import audit_chain_seal, audit_retention_apply
from audit.services.verify import audit_chain_verify
from audit.tasks import apply_audit_retention
from tests.audit.conftest import make_events, tampering

# Periods are aged in days from now: the clock stands still while each test runs.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock")]


def days_ago(days: float):
    return timezone.now() - timedelta(days=days)


@pytest.fixture
def aged_log(settings):
    """Four periods: 500, 450 and 10 days old, and today; 20 rows each."""
    settings.PORTAL_AUDIT_RETENTION_DAYS = 400
    for age in (500, 450, 10, 0):
        make_events(20, start=days_ago(age) - timedelta(minutes=5))
        audit_chain_seal(now=days_ago(age))


def test_periods_older_than_the_retention_are_deleted_whole(boundary_clock, aged_log):
    prune = audit_retention_apply()
    assert (prune.through_checkpoint, prune.through_position, prune.events_deleted) == (2, 40, 40)
    assert list(AuditCheckpoint.objects.values_list("number", flat=True)) == [3, 4]
    assert AuditChainLink.objects.order_by("position").first().position == 41
    # 40 periods' rows gone, plus the row retention writes about itself.
    assert AuditEvent.objects.count() == 41
    record = AuditEvent.objects.get(actor_username="system:audit_retention")
    assert (record.action, record.object_ref) == ("audit.prune", "audit-checkpoint:2")


def test_the_chain_still_verifies_after_retention(boundary_clock, aged_log):
    audit_retention_apply()
    audit_chain_seal()
    report = audit_chain_verify()
    assert report.ok, report.problems
    assert report.first_position == 41


def test_deleting_the_oldest_period_without_retention_is_caught(aged_log):
    with tampering():
        AuditEvent.objects.filter(
            seq__in=AuditChainLink.objects.filter(position__lte=20).values("event_seq")
        ).delete()
        AuditChainLink.objects.filter(position__lte=20).delete()
        AuditCheckpoint.objects.filter(number=1).delete()
    report = audit_chain_verify()
    assert [problem.kind for problem in report.problems] == ["checkpoint_deleted"]
    assert str(report.problems[0]).startswith("checkpoint 1 deleted")


def test_a_forged_retention_record_is_caught(aged_log):
    audit_retention_apply()
    with tampering():
        AuditPrune.objects.update(events_deleted=1)
    kinds = [problem.kind for problem in audit_chain_verify().problems]
    assert kinds == ["forged_prune"]


def test_the_newest_period_is_kept_however_old(settings):
    settings.PORTAL_AUDIT_RETENTION_DAYS = 30
    make_events(5, start=days_ago(100))
    audit_chain_seal(now=days_ago(99))
    assert audit_retention_apply() is None
    assert AuditEvent.objects.count() == 5


def test_rows_not_yet_sealed_are_never_deleted(aged_log):
    make_events(3, start=days_ago(600))  # old times, but not sealed into any period
    audit_retention_apply()
    assert AuditEvent.objects.filter(time__lt=days_ago(590)).count() == 3


def test_with_export_on_only_exported_periods_are_deleted(aged_log, settings):
    settings.PORTAL_AUDIT_S3_BUCKET = "audit-archive"
    AuditExport.objects.create(
        checkpoint_number=1,
        bucket="audit-archive",
        events_key="k1",
        checkpoint_key="c1",
        event_count=20,
        exported_at=timezone.now(),
    )
    prune = audit_retention_apply()
    assert prune.through_checkpoint == 1
    assert AuditCheckpoint.objects.filter(number=2).exists()


def test_a_retention_of_zero_days_keeps_everything(aged_log, settings):
    settings.PORTAL_AUDIT_RETENTION_DAYS = 0
    assert audit_retention_apply() is None
    assert AuditEvent.objects.count() == 80


def test_the_retention_command_says_what_it_deleted(aged_log):
    out = StringIO()
    call_command("audit_retention", stdout=out)
    assert out.getvalue().strip() == (
        "deleted 40 rows: every period through checkpoint 2 (position 40)"
    )
    out = StringIO()
    call_command("audit_retention", stdout=out)
    assert out.getvalue().strip() == "nothing is old enough to delete"


def test_the_daily_task_applies_retention(aged_log):
    assert apply_audit_retention() == 40
