"""The bulk Stop selected / Terminate selected confirmation says what each ticked host's own
confirmation says beyond the button's words (Instance.confirm_for, one rule): a pool replaces its
host, a running job recovers on a new host, a stopped host still ends with its lease. Each row
button for an action carries its words (data-action, data-confirm-text) for portal.js's dialog,
which says what they add to the bulk button's words; the rows are redrawn each poll, so what they
carry is current."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup
from django.test import Client
from django.utils.dateformat import format as date_format

from instances import services
from instances.models import Image, Instance, Job
from instances.services.jobs import job_submit
from tests.conftest import ED25519

pytestmark = pytest.mark.django_db


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def hosts(make_pool, running_host, alice, catalog, projects) -> dict[str, Instance]:
    """alice's plain on-demand host, a host of her pool trainers and her running job's host."""
    plain = running_host()
    make_pool(desired=1)
    services.autoscale()
    pooled = services.instance_provision(instance_id=Instance.objects.get(pool__isnull=False).pk)
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
    return {"plain": plain, "pool": pooled, "job": worker}


def said(host: Instance) -> dict[str, str]:
    """What the host's own (per-row) confirmation says, by action: confirm_for's words."""
    host = Instance.objects.with_detail().select_related("pool").get(pk=host.pk)
    return {action.name: action.confirm for action in host.actions_now}


def _own_words(html: str) -> dict[str, dict[str, str]]:
    """Each row's own confirmation words by action, as its buttons (data-action) carry them."""
    soup = BeautifulSoup(html, "html.parser")
    return {
        row["data-host"]: {
            button["data-action"]: button["data-confirm-text"]
            for button in row.select("button[data-action]")
        }
        for row in soup.select("tr[data-host]")
    }


@pytest.mark.parametrize("path", ["/hosts/", "/hosts/rows/"])
def test_each_rows_buttons_name_their_action_and_say_its_confirm_for(hosts, alice, path):
    """portal.js's bulk dialog reads a ticked row's button for its action (redrawn each poll,
    unlike the tick box, which hx-preserve keeps) and says what it adds to the plain words."""
    rows = _own_words(signed_in(alice).get(path).content.decode())
    plain, pool, job = (rows[str(hosts[name].pk)] for name in ("plain", "pool", "job"))
    for name, words in (("plain", plain), ("pool", pool), ("job", job)):
        assert words == said(hosts[name])

    # A pool's host: the plain words, then the pool's replacement (and no Stop at all).
    assert set(pool) == {"terminate"}
    assert pool["terminate"] == (
        "The host and its disk are deleted; this cannot be undone. It belongs to pool trainers, "
        "which launches a replacement to keep its 1 host; to have fewer, lower the pool's "
        "desired count instead."
    )
    # A running job's host: its own words instead of the plain ones.
    assert job["stop"].startswith("Job train's run ends with it and the job starts again")
    assert job["terminate"].startswith("Job train's run ends with it and the job starts again")
    # A plain host: Stop adds when the lease still ends it; Terminate adds nothing.
    end = Instance.objects.get(pk=hosts["plain"].pk).lease_expires_at
    assert plain["stop"] == (
        "Its disk is kept; while it is stopped you pay only for the disk. Its lease still ends "
        f"at {date_format(end, 'M j, H:i')} UTC, stopped or not: the host and its disk are "
        "deleted then."
    )
    assert plain["terminate"] == "The host and its disk are deleted; this cannot be undone."


def test_the_bulk_buttons_name_the_action_whose_row_words_they_add(hosts, alice):
    soup = BeautifulSoup(signed_in(alice).get("/hosts/").content.decode(), "html.parser")
    buttons = {b["value"]: b for b in soup.select("button[data-confirm-hosts]")}
    assert set(buttons) == {"stop", "terminate"}
    for action, button in buttons.items():
        # portal.js reads each ticked row's [data-action=<this>] button.
        assert button["data-confirm-hosts"] == action
        assert button.get_text() == f"{action.capitalize()} selected"
    assert buttons["terminate"]["data-confirm-text"] == (
        "The host and its disk are deleted; this cannot be undone."
    )
    assert buttons["stop"]["data-confirm-text"] == (
        "Its disk is kept; while it is stopped you pay only for the disk."
    )
    # Every one of these hosts can be ticked.
    ticks = {box["value"] for box in soup.select("input.pick[name=host]")}
    assert {str(host.pk) for host in hosts.values()} <= ticks
