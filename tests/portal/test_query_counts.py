"""The Quotas page, the dashboard and /api/v1/quotas/ cost a fixed number of queries: the same
for two projects as for eight (each with quotas, a member quota, history, a policy, a budget and
a live host)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing.services.budgets import budget_set
from instances.services import approval_policy_set, quota_set
from portal.models import Membership
from portal.services import membership_set, project_upsert


@pytest.fixture
def grow(place_order, alice, ada, catalog):
    """Bring the portal to ``n`` projects, each as busy as a real one."""

    def to(n: int) -> None:
        for i in range(n):
            project, created = project_upsert(slug=f"lab-{i}", name=f"Lab {i}")
            if not created:
                continue
            membership_set(project=project, user=alice, role=Membership.Role.MANAGER)
            quota_set(project=project, actor=ada, max_gpus=8, max_gpus_by_model={"A10G": 4})
            quota_set(project=project, actor=ada, max_gpus=16)  # a second history line
            quota_set(project=project, user=alice, actor=ada, max_instances=3)
            approval_policy_set(project=project, actor=ada, gpus_above=64)
            budget_set(project=project, actor=ada, monthly_amount="100")
            place_order(alice, project=project)

    return to


def queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200, url
    return len(captured.captured_queries)


@pytest.mark.parametrize(
    ("viewer", "url"),
    [
        ("ada", "/quotas/"),
        ("alice", "/dashboard/"),
        ("ada", "/dashboard/"),
        ("fin", "/dashboard/"),
        ("alice", "/api/v1/quotas/"),
    ],
)
def test_a_page_costs_the_same_queries_for_two_projects_as_for_eight(
    client, grow, request, viewer, url
):
    client.force_login(request.getfixturevalue(viewer))
    grow(2)
    client.get(url)  # first request: sessions, caches
    at_two = queries(client, url)
    grow(8)
    at_eight = queries(client, url)
    print(f"{url} as {viewer}: {at_two} queries at 2 projects, {at_eight} at 8")
    assert at_eight == at_two


def test_the_pages_show_every_project_they_counted(client, grow, ada, alice):
    grow(8)
    client.force_login(ada)
    page = client.get("/quotas/").content.decode()
    assert all(f'id="q-lab-{i}"' in page for i in range(8))
    client.force_login(alice)
    page = client.get("/dashboard/").content.decode()
    assert page.count('data-quota="GPUs"') == 8
    assert page.count('data-quota="Hosts"') == 8  # alice's own limit of 3 hosts, per project
    rows = client.get("/api/v1/quotas/?page_size=100").json()["results"]
    assert {row["in_use"]["gpus"] for row in rows} == {1}
