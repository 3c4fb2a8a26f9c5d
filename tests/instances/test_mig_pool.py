"""The portal's shared MIG pool: projects an admin puts in it place their slices on shared hosts
that any project in the pool fills (fewer idle slices), while a project left on its own hosts
shares a GPU host only with itself. A pool host is the portal's: researchers see their slice and
where it lives, not the host; only a project that launches with the portal's defaults may join."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from billing.services.budgets import budget_set, budgets_check
from instances import tasks
from instances.models import Instance, InstanceType, MigSlot, Order
from instances.services.mig import mig_host_follow, mig_slice_provision
from portal.models import Project
from portal.services import project_isolation_set
from tests.billing.timeline import spend

S = Instance.Status
PORTAL = Project.MigPool.PORTAL
__all__ = ["spend"]  # the fixture, shared with the billing tests


@pytest.fixture(autouse=True)
def _agents(settings):
    settings.PORTAL_SIMULATED_AGENTS = True


@pytest.fixture
def slice_of(place_order, catalog, projects):
    """Order one slice as ``user`` in ``project`` (a slug), launched unless ``launch`` is
    False."""

    def make(user, project: str, *, profile: str = "1g.5gb", launch: bool = True) -> Instance:
        order = place_order(
            user,
            project=projects[project],
            instance_type=catalog["p4d.24xlarge"],
            mig_profile=profile,
        )
        record = order.instances.get()
        if launch:
            tasks.provision_instance.apply(args=[str(record.pk)])
        return Instance.objects.get(pk=record.pk)

    return make


def pool(projects, *slugs, actor=None) -> None:
    for slug in slugs:
        project_isolation_set(project=projects[slug], actor=actor, mig_pool=PORTAL)


def shared_hosts():
    return Instance.objects.filter(order__mig_host=True)


def host_of(record: Instance) -> Instance:
    return Instance.objects.get(pk=MigSlot.objects.get(holder=record).host_id)


def test_two_projects_in_the_portals_pool_fill_one_host_and_others_keep_their_own(
    slice_of, projects, alice, bob, carol, ada
):
    pool(projects, "vision-lab", "nlp-lab", actor=ada)
    mine = slice_of(alice, "vision-lab")
    theirs = slice_of(carol, "nlp-lab")
    host = host_of(mine)
    assert host_of(theirs) == host and shared_hosts().count() == 1
    assert host.order.mig_pool == PORTAL
    assert host.events.filter(reason__contains="in the portal's shared pool").exists()
    devices = MigSlot.objects.filter(holder__isnull=False).values_list("device_uuid", flat=True)
    assert len(set(devices)) == 2
    # Back on its own hosts, a project's next slice gets a host of its own; the slice
    # already placed stays where it is.
    project_isolation_set(project=projects["nlp-lab"], actor=ada, mig_pool="project")
    own = slice_of(carol, "nlp-lab")
    assert host_of(own) != host and host_of(own).order.mig_pool == "project"
    assert host_of(theirs) == host
    # A project on its own hosts never takes a slot of the pool's, nor the pool of its.
    assert host_of(slice_of(carol, "nlp-lab")) == host_of(own)
    assert host_of(slice_of(bob, "vision-lab")) == host


def test_a_researcher_sees_their_slice_and_where_it_lives_but_not_the_pools_host(
    slice_of, projects, alice, carol, ada, api_as, client
):
    pool(projects, "vision-lab", "nlp-lab")
    mine = slice_of(alice, "vision-lab")
    slice_of(carol, "nlp-lab")
    host = host_of(mine)
    tasks.provision_instance.apply(args=[str(host.pk)])
    mig_host_follow(host_id=host.pk)
    as_alice = api_as(alice)
    assert as_alice.get(f"/api/v1/instances/{host.pk}/").status_code == 404
    listed = [
        row["id"] for row in as_alice.get("/api/v1/instances/?page_size=100").json()["results"]
    ]
    assert str(mine.pk) in listed and str(host.pk) not in listed
    orders = [row["id"] for row in as_alice.get("/api/v1/orders/?page_size=100").json()["results"]]
    assert str(mine.order_id) in orders and str(host.order_id) not in orders
    assert as_alice.get(f"/api/v1/instances/{mine.pk}/").json()["status"] == "running"
    client.force_login(alice)
    page = client.get(f"/hosts/{mine.pk}/").content.decode()
    assert host.name in page and f'href="/hosts/{host.pk}/"' not in page
    assert "the portal's shared pool, with other projects' slices" in page
    assert client.get(f"/hosts/{host.pk}/").status_code == 404
    assert host.name not in client.get("/hosts/?scope=project").content.decode()
    # Admins see the host, and whose each slice is, across projects.
    client.force_login(ada)
    shared = client.get(f"/hosts/{host.pk}/").content.decode()
    assert "of every project in its shared pool" in shared
    assert ">alice</a>" in shared and ">carol</a>" in shared
    assert api_as(ada).get(f"/api/v1/instances/{host.pk}/").status_code == 200


@pytest.mark.parametrize(
    "isolation",
    [
        {"kms_key_id": "alias/vision-lab"},
        {"subnet_ids": ["subnet-0a1b2c3d4e5f67890"]},
        {"tenancy": "dedicated"},
        {"instance_profile": "gpu-hosts"},
    ],
)
def test_only_a_project_that_launches_with_the_portals_defaults_joins_the_pool(
    api_as, ada, projects, isolation
):
    as_ada = api_as(ada)
    url = "/api/v1/projects/nlp-lab/"
    # Joining with isolation of its own, in one request or after it: refused, nothing changes.
    reply = as_ada.patch(url, {"mig_pool": "portal", **isolation}, format="json")
    assert reply.status_code == 400, reply.json()
    assert "keeps its slices on its own hosts" in str(reply.json())
    assert as_ada.patch(url, isolation, format="json").status_code == 200
    reply = as_ada.patch(url, {"mig_pool": "portal"}, format="json")
    assert reply.status_code == 400 and "own hosts" in str(reply.json())
    project = Project.objects.get(slug="nlp-lab")
    assert project.mig_pool == "project" and project.changes.count() == 1
    # In the pool, taking isolation of its own is refused the same way.
    reply = as_ada.patch("/api/v1/projects/vision-lab/", {"mig_pool": "portal"}, format="json")
    assert reply.status_code == 200 and reply.json()["mig_pool"] == "portal"
    reply = as_ada.patch("/api/v1/projects/vision-lab/", isolation, format="json")
    assert reply.status_code == 400
    assert Project.objects.get(slug="vision-lab").isolates() is False
    history = as_ada.get("/api/v1/projects/vision-lab/history/").json()["results"]
    assert history[0]["after"] == {"mig_pool": "portal"}


def test_an_admin_puts_a_project_in_the_pool_on_its_page_and_a_researcher_cannot(
    client, ada, alice, projects
):
    client.force_login(alice)
    assert client.post("/projects/vision-lab/", {"mig_pool": "portal"}).status_code == 403
    client.force_login(ada)
    page = client.get("/projects/vision-lab/").content.decode()
    assert "The project&#x27;s own shared hosts" in page and 'name="mig_pool"' in page
    reply = client.post("/projects/vision-lab/", {"tenancy": "default", "mig_pool": "portal"})
    assert reply.status_code == 302
    page = client.get("/projects/vision-lab/").content.decode()
    assert "The portal&#x27;s shared pool" in page
    refused = client.post("/projects/vision-lab/", {"tenancy": "dedicated", "mig_pool": "portal"})
    assert refused.status_code == 400
    assert "keeps its slices on its own hosts" in refused.content.decode().replace("&#x27;", "'")
    assert Project.objects.get(slug="vision-lab").tenancy == "default"


def test_an_empty_pool_host_is_laid_out_again_for_another_projects_profile(
    slice_of, projects, alice, carol, api_as
):
    pool(projects, "vision-lab", "nlp-lab")
    first = slice_of(alice, "vision-lab", profile="3g.20gb")
    host = host_of(first)
    assert api_as(alice).post(f"/api/v1/instances/{first.pk}/terminate/").status_code == 202
    tasks.terminate_instance.apply(args=[str(first.pk)])
    again = slice_of(carol, "nlp-lab", profile="2g.10gb")
    assert host_of(again) == host and shared_hosts().count() == 1
    assert Order.objects.get(pk=host.order_id).mig_profile.name == "2g.10gb"


@pytest.mark.django_db(transaction=True)
def test_two_projects_slices_placed_at_once_launch_one_pool_host(slice_of, projects, alice, carol):
    """Launches in the pool are taken one at a time under the type's row (the project's row
    would let two projects launch a host each where one has room for both)."""
    pool(projects, "vision-lab", "nlp-lab")
    mine = slice_of(alice, "vision-lab", launch=False)
    theirs = slice_of(carol, "nlp-lab", launch=False)
    held, release, placed = threading.Event(), threading.Event(), threading.Event()

    def first():  # alice's placement, paused while it holds the launch lock
        with transaction.atomic():
            InstanceType.objects.select_for_update().get(pk=mine.instance_type_id)
            held.set()
            release.wait(10)
            mig_slice_provision(instance=Instance.objects.get(pk=mine.pk))
        connection.close()

    def second():
        mig_slice_provision(instance=Instance.objects.get(pk=theirs.pk))
        placed.set()
        connection.close()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    threads[0].start()
    held.wait(10)
    threads[1].start()
    try:
        assert not placed.wait(1.0)  # carol's placement waits for alice's launch
    finally:
        release.set()
        for thread in threads:
            thread.join(20)
    assert placed.is_set()
    assert shared_hosts().count() == 1 and host_of(mine) == host_of(theirs)


def test_a_pool_projects_spent_budget_gives_back_its_slices_not_the_host_others_use(
    slice_of, projects, alice, carol, ada, spend, clock
):
    """The stop-hosts policy stops the project's hosts: its slices are given back (a slice
    cannot stop), but a shared host is nobody's to stop (it is billed to no project), so the
    other projects' slices on it run on."""
    pool(projects, "vision-lab", "nlp-lab")
    mine = slice_of(alice, "vision-lab")
    theirs = slice_of(carol, "nlp-lab")
    host = host_of(mine)
    tasks.provision_instance.apply(args=[str(host.pk)])
    mig_host_follow(host_id=host.pk)
    assert Instance.objects.get(pk=theirs.pk).status == S.RUNNING
    budget_set(
        project=projects["vision-lab"], actor=ada, monthly_amount="100.00", policy="stop_hosts"
    )
    spend("100.00")
    assert budgets_check().stopped == [str(mine.pk)]
    statuses = dict(Instance.objects.values_list("pk", "status"))
    assert statuses[mine.pk] == S.TERMINATING
    assert (statuses[theirs.pk], statuses[host.pk]) == (S.RUNNING, S.RUNNING)
