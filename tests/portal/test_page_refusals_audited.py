"""A refusal answered on a page is recorded as ``denied`` whatever status carries it: a 302 back
with the sentence as a message, or a form shown again (portal.lib.pages notes it for the row)."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from celery import shared_task
from django.template.defaultfilters import floatformat

from audit.models import AuditEvent
from audit.services import audit_record_system
from instances.services import approval_policy_set, quota_set

pytestmark = pytest.mark.django_db


@pytest.fixture
def waiting(projects, ada, place_order, bob, django_capture_on_commit_callbacks):
    approval_policy_set(project=projects["vision-lab"], actor=ada, gpus_above=2)
    with django_capture_on_commit_callbacks(execute=True):
        return place_order(bob, count=3)


def _row(path: str) -> AuditEvent:
    return AuditEvent.objects.filter(path=path).order_by("-seq").first()


def test_rejecting_without_a_reason_is_recorded_denied(client, ada, waiting):
    client.force_login(ada)
    path = f"/approvals/{waiting.pk}/reject/"
    response = client.post(path, {"reason": ""})
    assert response.status_code == 400  # the inbox again, the reason asked for at its field
    row = _row(path)
    assert (row.status, row.outcome) == (400, "denied")
    waiting.refresh_from_db()
    assert waiting.status == "pending_approval"


def test_approving_over_quota_is_recorded_denied(client, ada, projects, waiting):
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=1)
    client.force_login(ada)
    path = f"/approvals/{waiting.pk}/approve/"
    response = client.post(path, {"reason": "fine"})
    assert response.status_code == 302
    row = _row(path)
    assert (row.status, row.outcome, row.error) == (302, "denied", "refused: quota_exceeded")


def test_an_action_that_succeeds_stays_success(client, ada, waiting):
    client.force_login(ada)
    path = f"/approvals/{waiting.pk}/reject/"
    client.post(path, {"reason": "Not this week."})
    row = _row(path)
    assert (row.status, row.outcome, row.error) == (302, "success", "")


def test_a_quota_form_sent_back_is_recorded_denied(client, ada, catalog, projects):
    client.force_login(ada)
    client.post("/quotas/vision-lab/", {"vision-lab-max_gpus": "-1"})
    row = _row("/quotas/vision-lab/")
    assert (row.status, row.outcome) == (400, "denied")


@shared_task
def _records_after_a_while() -> None:
    time.sleep(0.004)
    audit_record_system(name="slow-task", action="slow")


def test_a_task_row_says_how_long_the_task_had_run_and_unmeasured_rows_show_a_dash(client, ada):
    audit_record_system(name="meter", action="meter")  # outside any task: not measured
    audit_record_system(name="export", action="export", duration_us=2500)
    _records_after_a_while.apply()  # a real task run: the signals start its clock
    row = AuditEvent.objects.get(action="slow")
    assert 4_000 <= row.duration_us < 5_000_000
    assert AuditEvent.objects.get(action="meter").duration_us == 0
    client.force_login(ada)
    page = client.get("/audit/?method=TASK&system=all").content.decode()
    assert "0.0 ms" not in page
    assert "2.5 ms" in page
    # Rounded as the page rounds (floatformat: half up on the decimal), not as Python's
    # f-string rounds the binary float: 4,050 µs shows "4.1 ms" where f"{4.05:.1f}" says 4.0.
    assert f"{floatformat(row.duration_ms, 1)} ms" in page
    assert "How long the task had run when it recorded this" in page
    assert "its duration was not measured" in page


@pytest.mark.parametrize("typed", ["2026-11-29", "2026-11-29 14:00", "2026-11-29T14:00"])
def test_the_date_filter_reads_utc_without_an_offset(client, ada, typed, settings):
    settings.TIME_ZONE = "America/New_York"  # the boxes say UTC, whatever the server's zone
    client.force_login(ada)
    response = client.get("/audit/", {"since": typed})
    assert response.status_code == 200
    since = response.context["filterset"].form.cleaned_data["since"]
    assert since.utcoffset() == timedelta(0)
    assert since.strftime("%Y-%m-%d") == "2026-11-29"
    assert since.hour == (14 if "14" in typed else 0)
    page = response.content.decode()
    assert 'type="datetime-local"' not in page
    assert "UTC, 24-hour clock" in page


def test_a_decision_that_is_neither_is_refused_and_recorded_denied(client, ada, waiting):
    client.force_login(ada)
    path = f"/approvals/{waiting.pk}/maybe/"
    response = client.post(path, {"reason": "hm"}, follow=True)
    assert "Approve or reject." in response.content.decode()
    row = _row(path)
    assert (row.status, row.outcome, row.error) == (302, "denied", "refused: unknown_decision")
