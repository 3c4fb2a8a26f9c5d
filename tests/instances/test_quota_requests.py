"""Asking for more quota: a member's request lands with the admins (a row on their Quotas page
and a notice each), they grant or decline it, and the member hears back; the same over the API,
audited like every call."""

from __future__ import annotations

import pytest
from django.test import Client

from audit.models import AuditEvent
from instances.models import Quota, QuotaRequest
from instances.services import quota_request_decide, quota_request_open, quota_set
from portal.models import Notice

pytestmark = pytest.mark.django_db


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_members_request_lands_on_the_admins_quotas_page_and_in_their_notices(
    alice, ada, projects
):
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=8)
    response = signed_in(alice).post(
        "/quotas/vision-lab/request/", {"gpus": "8", "reason": "a bigger sweep"}
    )
    assert response.status_code == 302
    ask = QuotaRequest.objects.get()
    assert (ask.requester, ask.gpus, ask.status) == (alice, 8, "open")
    notice = Notice.objects.get(user=ada)
    assert notice.subject == "alice asks for 8 more GPUs in vision-lab"
    assert notice.link == "/quotas/#q-vision-lab"
    page = signed_in(ada).get("/quotas/").content.decode()
    assert "asks for 8 more GPUs" in page and "Grant: raise to 16 GPUs" in page


def test_granting_raises_the_gpu_limit_in_the_quotas_history_and_tells_the_member(
    alice, ada, projects
):
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=8)
    ask = quota_request_open(requester=alice, project=projects["vision-lab"], gpus=4, reason="x")
    response = signed_in(ada).post(f"/quotas/requests/{ask.pk}/grant/")
    assert response.status_code == 302
    quota = Quota.objects.get(project=projects["vision-lab"], user=None)
    assert quota.max_gpus == 12
    assert quota.changes.first().after["max_gpus"] == 12
    ask.refresh_from_db()
    assert (ask.status, ask.decided_by, ask.answer) == ("granted", ada, "GPU limit raised to 12.")
    told = Notice.objects.get(user=alice)
    assert told.subject == "Your request for 4 more GPUs in vision-lab was granted"
    # The admins' notice of it is answered: it closes.
    assert Notice.objects.get(user=ada).closed_at is not None


def test_a_declined_request_changes_no_limit_and_cannot_be_decided_twice(alice, ada, projects):
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=8)
    ask = quota_request_open(requester=alice, project=projects["vision-lab"], gpus=4, reason="x")
    quota_request_decide(quota_request=ask, actor=ada, grant=False, answer="Not this month.")
    response = signed_in(ada).post(f"/quotas/requests/{ask.pk}/grant/")
    assert response.status_code == 302
    assert Quota.objects.get(project=projects["vision-lab"], user=None).max_gpus == 8
    ask.refresh_from_db()
    assert (ask.status, ask.answer) == ("declined", "Not this month.")


def test_a_request_without_a_reason_or_a_number_is_refused_and_saves_nothing(alice, ada, projects):
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=8)
    response = signed_in(alice).post("/quotas/vision-lab/request/", {"gpus": "0", "reason": " "})
    assert response.status_code == 400
    body = response.content.decode()
    assert "Ask for 1 to 1024 more GPUs." in body
    assert "Say what the GPUs are for" in body
    assert not QuotaRequest.objects.exists()


def test_over_the_api_a_member_asks_an_admin_decides_and_both_calls_are_audited(
    api_as, alice, ada, projects
):
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=8)
    answer = api_as(alice).post(
        "/api/v1/quota-requests/",
        {"project": "vision-lab", "gpus": 4, "reason": "a bigger sweep"},
        format="json",
    )
    assert answer.status_code == 201, answer.json()
    assert answer.json()["status"] == "open"
    pk = answer.json()["id"]
    decided = api_as(ada).post(
        f"/api/v1/quota-requests/{pk}/decide/", {"decision": "grant"}, format="json"
    )
    assert decided.status_code == 200
    assert decided.json()["status"] == "granted"
    paths = list(AuditEvent.objects.values_list("actor_username", "path", "status"))
    assert ("alice", "/api/v1/quota-requests/", 201) in paths
    assert ("ada", f"/api/v1/quota-requests/{pk}/decide/", 200) in paths


def test_over_the_api_bad_input_answers_400_with_a_code_and_a_sentence(api_as, alice):
    answer = api_as(alice).post(
        "/api/v1/quota-requests/",
        {"project": "vision-lab", "gpus": 0, "reason": "x"},
        format="json",
    )
    assert answer.status_code == 400
    assert answer.json()["fields"]["gpus"] == ["Ask for 1 to 1024 more GPUs, as a whole number."]
    assert answer.json()["code"]
    assert not QuotaRequest.objects.exists()


def test_a_stranger_cannot_ask_for_another_projects_quota(api_as, carol):
    answer = api_as(carol).post(
        "/api/v1/quota-requests/",
        {"project": "vision-lab", "gpus": 4, "reason": "x"},
        format="json",
    )
    assert answer.status_code == 400
    assert "not a member of a project called vision-lab" in str(answer.json())


def test_without_a_gpu_limit_there_is_nothing_to_ask_for_or_grant(alice, ada, projects, api_as):
    """A grant raises the project's GPU limit; a project without one took the request and
    marked it Granted while changing nothing."""
    page = signed_in(alice).get("/quotas/vision-lab/request/").content.decode()
    assert 'data-testid="no-gpu-limit"' in page and "quota-request-form" not in page
    answer = api_as(alice).post(
        "/api/v1/quota-requests/",
        {"project": "vision-lab", "gpus": 4, "reason": "x"},
        format="json",
    )
    assert answer.status_code == 409 and answer.json()["code"] == "no_gpu_limit"
    assert not QuotaRequest.objects.exists()
    # A limit that was removed after the request: granting is refused, declining still works.
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=8)
    ask = quota_request_open(requester=alice, project=projects["vision-lab"], gpus=4, reason="x")
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=None)
    assert "Grant (no GPU limit)" in signed_in(ada).get("/quotas/").content.decode()
    refused = api_as(ada).post(
        f"/api/v1/quota-requests/{ask.pk}/decide/", {"decision": "grant"}, format="json"
    )
    assert refused.status_code == 409 and refused.json()["code"] == "no_gpu_limit"
    ask.refresh_from_db()
    assert ask.status == "open"
    quota_request_decide(quota_request=ask, actor=ada, grant=False)
    ask.refresh_from_db()
    assert ask.status == "declined"
