"""The pool pages: the list, the new pool form (errors at the field, what will happen), a
pool's page (sizes, schedule in words, events, hosts, chart data), and the forms that change
it, each refusing bad input with a 400 at the field and strangers with a 403 or 404."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.conf import settings
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from demo.services.pools import POOL_NAME, seed_demo_pool
from instances import services
from instances.models import Image, Pool, PoolSample
from instances.services import approval_policy_set
from tests.conftest import ED25519
from tests.instances.pool_helpers import provision_all

pytestmark = pytest.mark.django_db


def new_pool_form(**overrides) -> dict:
    form = {
        "project": "vision-lab",
        "name": "notebooks",
        "instance_type": "g5.xlarge",
        "fallback_instance_types": "",
        "image": "tf-2.17-cuda12.3",
        "ssh_public_key": ED25519,
        "min_size": "0",
        "desired": "2",
        "max_size": "4",
        "on_demand_base": "1",
        "spot_percent": "50",
        "interruption_policy": "relaunch_spot",
        "target_gpu_utilization": "",
    }
    form.update(overrides)
    return form


def test_the_pools_page_lists_what_the_user_sees_with_sizes_and_last_event(
    client, make_pool, alice, carol
):
    pool = make_pool()
    services.autoscale()
    client.force_login(alice)
    page = client.get(reverse("pools"))
    assert page.status_code == 200
    text = page.content.decode()
    assert reverse("pool", args=[pool.pk]) in text
    assert "New pool" in text
    assert "launching" in text  # the autoscaler's event, newest
    client.force_login(carol)
    assert pool.name not in client.get(reverse("pools")).content.decode()


def test_finance_sees_pools_but_no_new_pool_button(client, make_pool, fin):
    make_pool()
    client.force_login(fin)
    page = client.get(reverse("pools")).content.decode()
    assert "trainers" in page and "New pool" not in page
    assert client.get(reverse("pool-new")).status_code == 403


def test_a_new_pool_is_created_through_the_form(client, alice, catalog):
    client.force_login(alice)
    assert client.get(reverse("pool-new")).status_code == 200
    answer = client.post(reverse("pool-new"), new_pool_form())
    pool = Pool.objects.get(name="notebooks")
    assert answer.status_code == 302 and answer.url == reverse("pool", args=[pool.pk])
    assert (pool.min_size, pool.desired, pool.max_size) == (0, 2, 4)
    assert (pool.on_demand_base, pool.spot_percent) == (1, 50)
    assert pool.status == Pool.Status.ACTIVE


def test_the_form_says_when_a_pool_needs_approval_and_why(client, alice, ada, projects, catalog):
    approval_policy_set(project=projects["vision-lab"], actor=ada, gpus_above=2)
    client.force_login(alice)
    preview = client.get(reverse("pool-preview"), new_pool_form(max_size="4"))
    assert "Needs approval because 4 GPUs is more than the 2" in preview.content.decode()
    answer = client.post(reverse("pool-new"), new_pool_form(max_size="4"), follow=True)
    assert Pool.objects.get().status == Pool.Status.AWAITING_APPROVAL
    assert "waits for approval" in answer.content.decode()
    small = client.get(reverse("pool-preview"), new_pool_form(max_size="2", name="x"))
    assert "No approval needed" in small.content.decode()


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"min_size": "3", "desired": "2"}, "desired", "desired must be between min_size 3"),
        ({"max_size": "0"}, "max_size", "max_size must be between 1"),
        ({"fallback_instance_types": "p4d.24xlarge"}, "fallback_instance_types", "same GPUs"),
        ({"ssh_public_key": "not a key"}, "ssh_public_key", ""),
        ({"name": ""}, "name", ""),
    ],
)
def test_bad_input_is_a_400_with_the_error_at_the_field(
    client, alice, catalog, overrides, field, words
):
    client.force_login(alice)
    answer = client.post(reverse("pool-new"), new_pool_form(**overrides))
    assert answer.status_code == 400
    assert field in answer.context["form"].errors
    assert words in " ".join(answer.context["form"].errors[field])
    assert not Pool.objects.exists()


def test_a_taken_name_is_said_at_the_name(client, alice, make_pool):
    make_pool(name="notebooks")
    client.force_login(alice)
    answer = client.post(reverse("pool-new"), new_pool_form())
    assert answer.status_code == 400
    assert "already has a pool named notebooks" in " ".join(answer.context["form"].errors["name"])


def test_the_pool_page_shows_sizes_schedule_in_words_events_and_hosts(client, alice, make_pool):
    pool = make_pool(desired=2, max_size=4)
    services.schedule_create(
        pool=pool, user=alice, cron="0 9 * * 1-5", timezone="Europe/Berlin", desired=4
    )
    services.autoscale()
    provision_all()
    client.force_login(alice)
    page = client.get(reverse("pool", args=[pool.pk]))
    assert page.status_code == 200
    text = page.content.decode()
    assert "At 09:00, Monday through Friday (Europe/Berlin): desired 4" in text
    assert 'data-kpi="running">2<' in text
    for host in pool.hosts.all():
        assert reverse("host", args=[host.pk]) in text
    assert "launching" in text
    panel = client.get(reverse("pool-panel", args=[pool.pk]))
    assert 'id="pool-panel"' in panel.content.decode()
    assert 'id="pool-activity"' in panel.content.decode()


def test_the_chart_data_is_the_pools_samples_of_the_last_day(client, alice, make_pool):
    pool = make_pool()
    now = timezone.now()
    PoolSample.objects.create(pool=pool, at=now - timedelta(hours=30), desired=9)
    PoolSample.objects.create(
        pool=pool,
        at=now - timedelta(minutes=5),
        desired=2,
        running_on_demand=1,
        running_spot=1,
        quota_hosts=32,
    )
    client.force_login(alice)
    body = client.get(reverse("pool-chart", args=[pool.pk])).json()
    assert body["desired"] == [2] and body["on_demand"] == [1] and body["spot"] == [1]
    assert body["quota"] == [32] and body["max_size"] == 8
    # The window the chart spans, whatever samples there are: the last 24 h.
    start, end = (datetime.fromisoformat(body[k]) for k in ("from", "to"))
    assert end - start == timedelta(hours=24) and abs(end - now) < timedelta(minutes=1)
    assert body["gap_seconds"] == max(3 * settings.PORTAL_AUTOSCALE_SECONDS, 900)  # then a gap


def test_set_desired_by_hand_and_refuse_outside_min_max(client, alice, make_pool):
    pool = make_pool(min_size=1, desired=2, max_size=4)
    client.force_login(alice)
    answer = client.post(reverse("pool-desired", args=[pool.pk]), {"desired": "3"})
    assert answer.status_code == 302
    pool.refresh_from_db()
    assert pool.desired == 3
    refused = client.post(reverse("pool-desired", args=[pool.pk]), {"desired": "9"})
    assert refused.status_code == 400
    assert "between min_size 1 and max_size 4" in " ".join(
        refused.context["desired_form"].errors["desired"]
    )
    pool.refresh_from_db()
    assert pool.desired == 3


def test_sizes_and_mix_change_through_the_edit_form(client, alice, make_pool):
    pool = make_pool(desired=2, max_size=4)
    client.force_login(alice)
    form = {
        "min_size": "1",
        "desired": "2",
        "max_size": "4",
        "on_demand_base": "2",
        "spot_percent": "100",
        "interruption_policy": "fallback_on_demand",
        "target_gpu_utilization": "70",
    }
    assert client.post(reverse("pool-edit", args=[pool.pk]), form).status_code == 302
    pool.refresh_from_db()
    assert (pool.min_size, pool.on_demand_base, pool.spot_percent) == (1, 2, 100)
    assert pool.target_gpu_utilization == 70
    bad = client.post(reverse("pool-edit", args=[pool.pk]), {**form, "on_demand_base": "7"})
    assert bad.status_code == 400
    assert "on_demand_base" in bad.context["sizes_form"].errors


@pytest.mark.parametrize(
    ("cron", "zone", "field", "words"),
    [
        ("0 9 * *", "UTC", "cron", "five fields"),
        ("0 25 * * *", "UTC", "cron", "hour"),
        ("0 9 * * 1-5", "Mars/Olympus", "timezone", "Mars/Olympus"),
    ],
)
def test_a_bad_cron_or_zone_is_a_400_at_the_field(
    client, alice, make_pool, cron, zone, field, words
):
    pool = make_pool()
    client.force_login(alice)
    answer = client.post(
        reverse("pool-schedule-add", args=[pool.pk]),
        {"cron": cron, "timezone": zone, "desired": "4"},
    )
    assert answer.status_code == 400
    errors = answer.context["schedule_form"].errors
    assert words in " ".join(errors[field])
    assert answer.context["schedule_open"]
    assert not pool.schedules.exists()


def test_schedules_are_added_changed_and_removed(client, alice, make_pool):
    pool = make_pool(max_size=8)
    client.force_login(alice)
    add = client.post(
        reverse("pool-schedule-add", args=[pool.pk]),
        {"cron": "0 9 * * 1-5", "timezone": "Asia/Shanghai", "desired": "8"},
    )
    assert add.status_code == 302
    schedule = pool.schedules.get()
    edit = client.post(
        reverse("pool-schedule-edit", args=[pool.pk, schedule.pk]),
        {"cron": "0 21 * * *", "timezone": "UTC", "desired": "0"},
    )
    assert edit.status_code == 302
    schedule.refresh_from_db()
    assert (schedule.cron, schedule.timezone, schedule.desired) == ("0 21 * * *", "UTC", 0)
    bad = client.post(
        reverse("pool-schedule-edit", args=[pool.pk, schedule.pk]),
        {"cron": "nope", "timezone": "UTC", "desired": "0"},
    )
    assert bad.status_code == 400
    assert "cron" in bad.context["schedules"][0]["form"].errors
    assert bad.context["schedules"][0]["open"]
    gone = client.post(reverse("pool-schedule-delete", args=[pool.pk, schedule.pk]))
    assert gone.status_code == 302 and not pool.schedules.exists()


def test_deleting_a_pool_ends_its_hosts(client, alice, make_pool):
    pool = make_pool(desired=2)
    services.autoscale()
    provision_all()
    client.force_login(alice)
    page = client.get(reverse("pool", args=[pool.pk])).content.decode()
    assert "Delete pool trainers in vision-lab? Its 2 live hosts will be terminated." in page
    answer = client.post(reverse("pool-delete", args=[pool.pk]))
    assert answer.status_code == 302 and answer.url == reverse("pools")
    pool.refresh_from_db()
    assert pool.status == Pool.Status.DELETING
    assert not pool.hosts.filter(status="running").exists()


def test_members_read_a_pool_but_only_its_creator_managers_and_admins_change_it(
    client, make_pool, bob, carol, ada
):
    pool = make_pool()
    client.force_login(bob)
    page = client.get(reverse("pool", args=[pool.pk]))
    assert page.status_code == 200 and "Delete pool" not in page.content.decode()
    assert client.post(reverse("pool-desired", args=[pool.pk]), {"desired": "1"}).status_code == 403
    assert client.post(reverse("pool-delete", args=[pool.pk])).status_code == 403
    client.force_login(carol)
    assert client.get(reverse("pool", args=[pool.pk])).status_code == 404
    assert client.post(reverse("pool-delete", args=[pool.pk])).status_code == 404
    client.force_login(ada)
    assert client.post(reverse("pool-desired", args=[pool.pk]), {"desired": "1"}).status_code == 302


def test_the_dashboard_shows_each_pools_state(client, alice, make_pool):
    make_pool(desired=2)
    services.autoscale()
    client.force_login(alice)
    page = client.get(reverse("dashboard")).content.decode()
    assert 'data-testid="dashboard-pools"' in page
    assert "0 of 2 running, 2 starting" in page


def test_seed_demo_makes_the_vision_lab_pool_once(catalog, projects, alice):
    said = seed_demo_pool()
    pool = Pool.objects.get(name=POOL_NAME)
    assert "desired 4 from 09:00" in said
    words = sorted(services.schedule_words(s) for s in pool.schedules.all())
    assert words == [
        "At 09:00, Monday through Friday (Europe/Berlin): desired 4",
        "At 21:00 (Europe/Berlin): desired 0",
    ]
    assert "already there" in seed_demo_pool()
    assert Pool.objects.count() == 1 and pool.schedules.count() == 2
    assert Image.objects.filter(pk=pool.image_id).exists()


def test_seed_demo_command_twice_changes_nothing(db, settings):
    call_command("seed_demo", "--no-history", stdout=_Sink())
    before = (Pool.objects.count(), sum(p.schedules.count() for p in Pool.objects.all()))
    call_command("seed_demo", "--no-catalog", stdout=_Sink())
    assert (Pool.objects.count(), sum(p.schedules.count() for p in Pool.objects.all())) == before
    assert before == (1, 2)


class _Sink:
    def write(self, *_):
        pass

    def flush(self):
        pass


def test_the_pools_page_costs_the_same_queries_for_one_pool_or_eight(client, alice, make_pool):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    make_pool(name="p0")
    services.autoscale()
    client.force_login(alice)
    client.get(reverse("pools"))  # warm the session and caches

    def queries() -> int:
        with CaptureQueriesContext(connection) as seen:
            assert client.get(reverse("pools")).status_code == 200
        return len(seen)

    one = queries()
    for n in range(1, 8):
        make_pool(name=f"p{n}", desired=1)
    services.autoscale()
    assert queries() == one, f"{one} queries for one pool"
    print(f"pools page: {one} queries for 1 pool and for 8")


def test_my_hosts_lists_pool_hosts_under_their_pool_and_says_terminating_one_is_replaced(
    client, make_pool, alice, place_order
):
    pool = make_pool(desired=2)
    services.autoscale()
    provision_all()
    place_order(alice)  # and one host alice ordered herself
    client.force_login(alice)
    rows = client.get(reverse("host-rows")).content.decode()
    head = rows.split(f'data-pool="{pool.pk}"')[1].split("</header>")[0]
    assert (
        f'Pool <a href="{reverse("pool", args=[pool.pk])}" data-testid="pool-link">trainers' in head
    )
    assert "keeps 2 hosts" in head and "ordered" not in head
    assert rows.count("data-pool=") == 1 and rows.count("order-group-head") == 2
    replaced = (
        "It belongs to pool trainers, which launches a replacement to keep its 2 hosts; to "
        "have fewer, lower the pool&#x27;s desired count instead."
    )
    assert rows.count(replaced) == 2  # each pool host's Terminate; the ordered one's says not
    host = pool.hosts.first()
    page = client.get(reverse("host", args=[host.pk])).content.decode()
    assert replaced in page
