"""My hosts / All hosts and the jobs list past one page: every row is a page away (200 a page,
newest first), the running total counts every host the filters keep, not only the page's, and
a page costs the same number of queries for 3 rows as for 200."""

from __future__ import annotations

import uuid

import pytest
from bs4 import BeautifulSoup
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from instances.models import Image, Instance, InstanceEvent, Job, Order
from instances.services.jobs import job_submit
from instances.views import hosts as hosts_view

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _checkpoints(settings, tmp_path):
    settings.PORTAL_CHECKPOINT_LOCAL_DIR = tmp_path / "checkpoints"
    settings.PORTAL_CHECKPOINT_S3_PREFIX = ""


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def clone(row, **changes):
    """An unsaved copy of ``row`` with a new id (a host: its own token, no cloud id)."""
    model = type(row)
    fields = {f.attname: getattr(row, f.attname) for f in model._meta.concrete_fields}
    fields["id"] = None if model is InstanceEvent else uuid.uuid4()  # an event's is a serial
    fields.update(changes)
    if model is Instance:
        fields.update(client_token=uuid.uuid4().hex, cloud_id=None)
    return model(**fields)


def more_hosts(host, n: int, **changes) -> list[Instance]:
    """``n`` more hosts like ``host`` (its order, owner, type, market and timeline, so that
    every row costs the page the same), in two inserts."""
    rows = Instance.objects.bulk_create([clone(host, **changes) for _ in range(n)])
    events = list(host.events.all())
    InstanceEvent.objects.bulk_create(
        [clone(event, instance_id=row.pk) for row in rows for event in events]
    )
    return rows


def page(client, path: str) -> BeautifulSoup:
    response = client.get(path)
    assert response.status_code == 200
    return BeautifulSoup(response.content, "html.parser")


def total(html: BeautifulSoup) -> str:
    return " ".join(html.select_one('[data-testid="hosts-total"]').text.split())


def listed(html: BeautifulSoup, attribute: str) -> list[str]:
    return [row[attribute] for row in html.select(f"tr[{attribute}]")]


def test_the_running_total_counts_every_host_and_every_host_is_a_page_away(
    clock, alice, bob, running_host
):
    """210 of alice's hosts (205 running on-demand g5.xlarge at $1.006/h, 3 stopped, 2 just
    terminated) and 5 of bob's: the total is the same on both pages and counts all of them."""
    mine = running_host(alice)
    more_hosts(mine, 204)
    more_hosts(mine, 3, status=Instance.Status.STOPPED)
    more_hosts(mine, 2, status=Instance.Status.TERMINATED, status_changed_at=timezone.now())
    more_hosts(running_host(bob), 4)
    client = signed_in(alice)

    first, second = page(client, "/hosts/"), page(client, "/hosts/?page=2")
    for html in (first, second):
        assert total(html) == "208 hosts · 205 running at $206.23/h"
    assert len(listed(first, "data-host")) == 200 and len(listed(second, "data-host")) == 10
    assert set(listed(first, "data-host")) | set(listed(second, "data-host")) == {
        str(pk) for pk in Instance.objects.filter(owner=alice).values_list("pk", flat=True)
    }
    assert "Page 1 of 2" in first.select_one("nav.audit-pager").text
    assert first.select_one('nav.audit-pager a[rel="next"]')["href"] == "?page=2"
    # The polled rows keep the page they are on, and the total.
    rows = page(client, "/hosts/rows/?page=2")
    assert len(listed(rows, "data-host")) == 10
    assert rows.select_one("#host-rows")["hx-get"].endswith("?page=2")
    assert total(rows) == "208 hosts · 205 running at $206.23/h"

    # The filters narrow the total with the list: every project's hosts, bob's too.
    projects = page(client, "/hosts/?scope=projects&page=2")
    assert total(projects) == "213 hosts · 210 running at $211.26/h"
    assert len(listed(projects, "data-host")) == 15
    assert projects.select_one('nav.audit-pager a[rel="prev"]')["href"] == "?scope=projects&page=1"


def test_the_total_is_each_hosts_rate_as_its_row_says_it(clock, alice, running_host):
    """Spot and on-demand hosts: the total is the sum of the rows' own $/h (rate_now)."""
    on_demand = running_host(alice)
    spot = running_host(alice, market="spot", interruption_policy="notify")
    more_hosts(on_demand, 150)
    more_hosts(spot, 100)
    response = signed_in(alice).get("/hosts/")
    rates = [host["rate"] for host in response.context["hosts"] if host["rate"] is not None]
    assert len(rates) == 200
    expected = sum(
        (hosts_view.rate_now(host) for host in Instance.objects.filter(owner=alice)), start=0
    )
    assert response.context["running"] == 252
    assert response.context["rate"] == expected
    assert response.context["rate"] > sum(rates)


def host_page_queries(client, path: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(path).status_code == 200
    return len(captured.captured_queries)


def test_my_hosts_costs_the_same_queries_for_3_hosts_as_for_250(clock, alice, running_host):
    host = running_host(alice)
    more_hosts(host, 2)
    client = signed_in(alice)
    few = [host_page_queries(client, path) for path in ("/hosts/", "/hosts/rows/")]
    more_hosts(host, 247)
    more_hosts(host, 3, status=Instance.Status.STOPPED)
    many = [host_page_queries(client, path) for path in ("/hosts/", "/hosts/rows/")]
    assert many == few
    assert host_page_queries(client, "/hosts/?page=2") == few[0]


# --- the jobs list ----------------------------------------------------------------------------


def more_jobs(job: Job, n: int) -> None:
    """``n`` more jobs like ``job``, each with its own order and a host like its own."""
    orders = Order.objects.bulk_create([clone(job.order) for _ in range(n)])
    Job.objects.bulk_create(
        [clone(job, order_id=order.pk, name=f"{job.name}-{i}") for i, order in enumerate(orders)]
    )
    (host,) = job.order.instances.all()
    Instance.objects.bulk_create(
        [clone(host, order_id=order.pk, status_changed_at=timezone.now()) for order in orders]
    )


@pytest.fixture
def a_job(alice, catalog, projects):
    return job_submit(
        requester=alice,
        project=projects["vision-lab"],
        instance_type=catalog["g5.xlarge"],
        image=Image.objects.get(name="tf-2.17-cuda12.3"),
        market="on_demand",
        name="bert",
        command="python train.py",
    )


def test_every_job_is_a_page_away(clock, alice, a_job):
    more_jobs(a_job, 229)
    client = signed_in(alice)
    first, second = page(client, "/jobs/"), page(client, "/jobs/?page=2")
    assert len(listed(first, "data-job")) == 200 and len(listed(second, "data-job")) == 30
    assert set(listed(first, "data-job")) | set(listed(second, "data-job")) == set(
        Job.objects.values_list("name", flat=True)
    )
    assert "Page 2 of 2" in second.select_one("nav.audit-pager").text
    assert second.select_one('nav.audit-pager a[rel="prev"]')["href"] == "?page=1"


def test_one_page_of_jobs_has_no_pager(clock, alice, a_job):
    more_jobs(a_job, 2)
    html = page(signed_in(alice), "/jobs/")
    assert len(listed(html, "data-job")) == 3 and html.select_one("nav.audit-pager") is None


def test_the_jobs_list_costs_the_same_queries_for_3_jobs_as_for_250(clock, alice, a_job):
    more_jobs(a_job, 2)
    client = signed_in(alice)
    few = host_page_queries(client, "/jobs/")
    more_jobs(a_job, 247)
    assert host_page_queries(client, "/jobs/") == few
    assert host_page_queries(client, "/jobs/?page=2") == few
