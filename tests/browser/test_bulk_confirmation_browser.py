"""The bulk confirmation on My hosts says, under the button's own words, what it does to each
ticked host that is more than those words (a pool's host is replaced, a stopped host's lease still
ends it), once per consequence with the hosts it applies to, and nothing for the plain ones; it
is portal.js's dialog, built from the rows' data attributes, under the CSP."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from django.utils.dateformat import format as date_format
from playwright.sync_api import expect

from instances import services
from instances.models import Image, Instance, Job
from instances.services.jobs import job_submit
from tests.browser.conftest import answer_confirmation
from tests.conftest import ED25519
from tests.instances.pool_helpers import make_pool  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def hosts(place_order, alice, make_pool):  # noqa: F811
    """alice's pair of plain on-demand hosts (one order, one lease end) and her pool's host."""
    order = place_order(alice, count=2)
    pair = [services.instance_provision(instance_id=i.pk) for i in order.instances.order_by("id")]
    end = (timezone.now() + timedelta(hours=7)).replace(second=0, microsecond=0)
    Instance.objects.filter(pk__in=[h.pk for h in pair]).update(lease_expires_at=end)
    make_pool(desired=1)
    services.autoscale()
    pooled = services.instance_provision(instance_id=Instance.objects.get(pool__isnull=False).pk)
    return {"pair": pair, "pool": pooled, "end": end}


def test_bulk_terminate_says_a_pool_host_is_replaced_and_nothing_more_for_plain_ones(
    page, sign_in, hosts
):
    sign_in("alice")
    page.goto("/hosts/")
    for host in [*hosts["pair"], hosts["pool"]]:
        page.locator(f"#pick-{host.pk}").check()
    page.get_by_role("button", name="Terminate selected").click()
    dialog = page.locator("dialog.confirm-dialog[open]")
    expect(dialog.locator(".confirm-title")).to_have_text("Terminate 3 hosts?")
    notes = dialog.locator(".confirm-note")
    expect(notes).to_have_count(1)
    expect(notes).to_have_text(
        f"{hosts['pool'].name} · g5.xlarge: It belongs to pool trainers, which launches a "
        "replacement to keep its 1 host; to have fewer, lower the pool's desired count instead."
    )
    expect(dialog.locator(".confirm-list li")).to_have_count(3)
    answer_confirmation(page, accept=False)

    # Without the pool's host ticked, the plain words alone.
    page.locator(f"#pick-{hosts['pool'].pk}").uncheck()
    page.get_by_role("button", name="Terminate selected").click()
    expect(dialog.locator(".confirm-notes")).to_be_hidden()
    answer_confirmation(page, accept=False, says="The host and its disk are deleted")


def test_bulk_stop_says_once_when_the_lease_still_ends_the_hosts(page, sign_in, hosts):
    end = hosts["end"]
    sign_in("alice")
    page.goto("/hosts/")
    page.locator(f'input[data-select-group="{hosts["pair"][0].order_id}"]').check()
    page.get_by_role("button", name="Stop selected").click()
    dialog = page.locator("dialog.confirm-dialog[open]")
    expect(dialog.locator(".confirm-title")).to_have_text("Stop 2 hosts?")
    expect(dialog.locator(".confirm-note")).to_have_text(
        [
            f"Each of the 2: Its lease still ends at {date_format(end, 'M j, H:i')} UTC, "
            "stopped or not: the host and its disk are deleted then."
        ]
    )
    answer_confirmation(page, says="Stop 2 hosts?")
    expect(page.locator(".flash")).to_contain_text("Stop requested for 2 hosts")
    statuses = set(
        Instance.objects.filter(pk__in=[h.pk for h in hosts["pair"]]).values_list(
            "status", flat=True
        )
    )
    assert statuses <= {"stopping", "stopped"}


def test_bulk_stop_says_a_running_jobs_host_recovers_beside_the_plain_hosts_lease(
    page, sign_in, hosts, alice, catalog, projects
):
    job = job_submit(
        requester=alice,
        project=projects["vision-lab"],
        instance_type=catalog["g5.xlarge"],
        image=Image.objects.get(name="tf-2.17-cuda12.3"),
        market="on_demand",
        name="train",
        command="python train.py",
        time_limit_minutes=90,
        ssh_public_key=ED25519,
    )
    worker = services.instance_provision(instance_id=job.order.instances.get().pk)
    Job.objects.filter(pk=job.pk).update(status=Job.Status.RUNNING, host=worker)
    pair, end = hosts["pair"], hosts["end"]
    sign_in("alice")
    page.goto("/hosts/")
    for host in [*pair, worker]:
        page.locator(f"#pick-{host.pk}").check()
    page.get_by_role("button", name="Stop selected").click()
    dialog = page.locator("dialog.confirm-dialog[open]")
    expect(dialog.locator(".confirm-title")).to_have_text("Stop 3 hosts?")
    # The notes name hosts in the order listed (newest first: the job's host is the newest).
    listed = page.locator("input[name=host]:checked").evaluate_all(
        "boxes => boxes.map((box) => box.dataset.name)"
    )
    names = {host.pk: f"{host.name} · g5.xlarge" for host in [*pair, worker]}
    assert listed[0] == names[worker.pk]
    expect(dialog.locator(".confirm-note")).to_have_text(
        [
            f"{names[worker.pk]}: Job train's run ends with it and the job starts again on a new "
            "host (a recovery, billed as it runs); this one stays stopped, its disk billed, until "
            "the job ends. To end the job, cancel it instead.",
            f"{', '.join(listed[1:])}: Its lease still ends at "
            f"{date_format(end, 'M j, H:i')} UTC, stopped or not: the host and its disk are "
            "deleted then.",
        ]
    )
    answer_confirmation(page, accept=False)


def test_many_different_notes_stay_a_few_lines(page, sign_in, place_order, alice):
    """Hosts of six orders whose leases end a minute apart: each lease sentence differs, so the
    dialog gave a line each; it shows four and says how many more hosts have their own."""
    soon = (timezone.now() + timedelta(hours=5)).replace(second=0, microsecond=0)
    ticked = []
    for n in range(6):
        host = services.instance_provision(instance_id=place_order(alice).instances.get().pk)
        Instance.objects.filter(pk=host.pk).update(lease_expires_at=soon + timedelta(minutes=n))
        ticked.append(host)
    sign_in("alice")
    page.goto("/hosts/")
    for host in ticked:
        page.locator(f"#pick-{host.pk}").check()
    page.get_by_role("button", name="Stop selected").click()
    notes = page.locator("dialog.confirm-dialog[open] .confirm-note")
    expect(notes).to_have_count(5)
    expect(notes.last).to_have_text(
        "2 more hosts: each have their own note: their rows' own Stop or Terminate say what it is."
    )
    expect(page.locator("dialog.confirm-dialog[open] .confirm-list li")).to_have_count(6)
    answer_confirmation(page, accept=False)
