"""Leases: a warning 24 h and 1 h before a lease ends, each sent once; extensions up to the
project's longest lease and only if the budget admits the extra hours."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core import mail

from billing.services.budgets import budget_set
from instances import services
from instances.models import Instance, LeaseNotice
from instances.services import quota_set
from portal.models import Notice

pytestmark = pytest.mark.django_db


@pytest.fixture
def passes(django_capture_on_commit_callbacks):
    """Run the warning pass as beat does, ``times`` times, with its emails sent on commit."""

    def run(times: int = 1) -> list:
        warned = []
        for _ in range(times):
            with django_capture_on_commit_callbacks(execute=True):
                warned += services.leases_warn()
        return warned

    return run


def _extend(api_as, user, host, hours):
    return api_as(user).post(f"/api/v1/instances/{host.pk}/extend/", {"hours": hours})


def _lease_notices(user) -> list[str]:
    return list(
        Notice.objects.filter(user=user, subject__startswith="Lease ends")
        .order_by("id")
        .values_list("subject", flat=True)
    )


def test_each_warning_is_sent_once_however_often_beat_runs(clock, alice, running_host, passes):
    host = running_host(lease_hours=48)
    end = host.lease_expires_at
    assert passes(3) == []  # 48 h left: nothing due yet
    clock.move_to(end - timedelta(hours=23, minutes=59))
    assert passes(5) == [(str(host.pk), 24 * 60)]
    clock.move_to(end - timedelta(minutes=59))
    assert passes(5) == [(str(host.pk), 60)]
    clock.move_to(end - timedelta(minutes=1))
    assert passes(3) == []
    assert _lease_notices(alice) == [
        "Lease ends in 23 h 59 min: g5.xlarge in vision-lab",
        "Lease ends in 59 minutes: g5.xlarge in vision-lab",
    ]
    assert [m.subject for m in mail.outbox] == [f"[GPU Portal] {s}" for s in _lease_notices(alice)]
    assert "will be terminated at" in mail.outbox[0].body
    assert f"/hosts/{host.pk}/" in mail.outbox[0].body
    assert LeaseNotice.objects.filter(instance=host).count() == 2
    notes = host.events.filter(reason__startswith="lease warning").values_list("actor", flat=True)
    assert list(notes) == ["system:lease", "system:lease"]


def test_a_lease_shorter_than_a_warning_gets_only_the_ones_that_fit(clock, running_host, passes):
    eight = running_host(lease_hours=8)
    one = running_host(lease_hours=1)
    assert passes() == []  # 8 h and 1 h left: a 24 h warning would come at launch; none does
    clock.shift(timedelta(minutes=45))
    assert passes(2) == [(str(one.pk), 15)]
    clock.shift(timedelta(hours=6, minutes=16))
    assert passes(2) == [(str(eight.pk), 60)]


def test_a_one_hour_lease_is_warned_a_quarter_of_an_hour_before_it_ends(
    clock, alice, running_host, passes
):
    host = running_host(lease_hours=1)
    clock.move_to(host.lease_expires_at - timedelta(minutes=15, seconds=1))
    assert passes() == []
    clock.shift(timedelta(seconds=31))
    assert passes(3) == [(str(host.pk), 15)]
    assert _lease_notices(alice) == ["Lease ends in 14 minutes: g5.xlarge in vision-lab"]
    assert "will be terminated at" in mail.outbox[0].body


def test_a_missed_window_sends_only_the_most_urgent_warning(clock, running_host, passes):
    host = running_host(lease_hours=48)
    clock.move_to(host.lease_expires_at - timedelta(minutes=30))  # beat was down for a day
    assert passes(2) == [(str(host.pk), 60)]


def test_an_extension_moves_the_end_and_rearms_the_warnings(clock, alice, running_host, passes):
    host = running_host(lease_hours=8)
    end = host.lease_expires_at
    clock.move_to(end - timedelta(minutes=50))
    assert passes() == [(str(host.pk), 60)]
    host = services.instance_extend_lease(instance=host, user=alice, hours=4)
    assert host.lease_expires_at == end + timedelta(hours=4)
    assert passes() == []  # 4 h 50 min left of a 12 h lease: the next warning is at 1 h
    clock.move_to(host.lease_expires_at - timedelta(minutes=40))
    assert passes(3) == [(str(host.pk), 60)]
    assert LeaseNotice.objects.filter(instance=host).count() == 2


def test_extending_adds_hours_and_notes_it_on_the_timeline(clock, alice, running_host, api_as):
    host = running_host(lease_hours=8)
    end = host.lease_expires_at
    response = _extend(api_as, alice, host, 16)
    assert response.status_code == 200, response.content
    assert response.json()["lease_extended_hours"] == 16
    host.refresh_from_db()
    assert host.lease_expires_at == end + timedelta(hours=16)
    assert host.lease_hours_total == 24
    note = host.events.order_by("-id").first()
    assert note.actor == "user:alice"
    assert "lease extended by 16 h by alice" in note.reason
    assert "24 h from when it first ran" in note.reason


def test_an_extension_past_the_portals_longest_lease_is_refused(
    clock, settings, alice, running_host, api_as
):
    settings.PORTAL_LEASE_MAX_HOURS = 10
    host = running_host(lease_hours=8)
    end = host.lease_expires_at
    response = _extend(api_as, alice, host, 3)
    assert response.status_code == 409
    body = response.json()
    assert body["code"] == "lease_limit"
    assert "the portal's longest lease is 10 h" in body["detail"]
    assert "Extend by at most 2 h" in body["detail"]
    host.refresh_from_db()
    assert host.lease_expires_at == end
    assert _extend(api_as, alice, host, 2).status_code == 200
    refused = _extend(api_as, alice, host, 1).json()
    assert "It cannot be extended further" in refused["detail"]


def test_an_extension_past_the_projects_quota_lease_is_refused(
    clock, ada, alice, projects, running_host, api_as
):
    host = running_host(lease_hours=8)
    quota_set(project=projects["vision-lab"], actor=ada, max_lease_hours=12)
    response = _extend(api_as, alice, host, 5)
    assert response.status_code == 409
    assert "the quota of vision-lab is 12 h" in response.json()["detail"]
    assert _extend(api_as, alice, host, 4).status_code == 200


def test_an_extension_the_budget_cannot_cover_is_refused(
    clock, ada, alice, projects, running_host, api_as
):
    host = running_host(lease_hours=8)  # commits 8 h x $1.006 = $8.048
    budget_set(
        project=projects["vision-lab"], actor=ada, monthly_amount="20.00", policy="block_all"
    )
    # $11.952 left: 12 h more ($12.072) does not fit; 11 h ($11.066) does.
    response = _extend(api_as, alice, host, 12)
    assert response.status_code == 409
    body = response.json()
    assert body["code"] == "budget_exceeded"
    assert "extending the lease by 12 h would cost $12.07" in body["detail"]
    assert "$11.95 left" in body["detail"]
    host.refresh_from_db()
    assert host.lease_extended_hours == 0
    assert _extend(api_as, alice, host, 11).status_code == 200
    # What is left now is what the extension committed: the next hour no longer fits.
    again = _extend(api_as, alice, host, 1)
    assert again.json()["code"] == "budget_exceeded"


def test_an_extension_does_not_count_the_host_twice_against_a_full_quota(
    clock, ada, alice, projects, running_host, api_as
):
    host = running_host(lease_hours=8)
    quota_set(project=projects["vision-lab"], actor=ada, max_instances=1)
    response = _extend(api_as, alice, host, 2)
    assert response.status_code == 200, response.content


def test_only_a_host_with_a_lease_running_can_be_extended(clock, alice, running_host, api_as):
    host = running_host(lease_hours=8)
    services.instance_request_terminate(instance=host, user=alice)
    response = _extend(api_as, alice, host, 2)
    assert response.status_code == 409
    assert response.json()["code"] == "invalid_state"


def test_a_lease_that_ran_its_extended_length_expires_saying_so(clock, alice, running_host):
    host = running_host(lease_hours=8)
    host = services.instance_extend_lease(instance=host, user=alice, hours=2)
    clock.move_to(host.lease_expires_at - timedelta(seconds=1))
    assert services.leases_expire() == []
    clock.shift(timedelta(seconds=2))
    assert services.leases_expire() == [str(host.pk)]
    host.refresh_from_db()
    assert host.status == Instance.Status.TERMINATING
    assert host.status_reason == "the 10 h lease ended"


def test_extend_on_the_host_page(clock, client, alice, running_host):
    host = running_host(lease_hours=8)
    client.force_login(alice)
    page = client.get(f"/hosts/{host.pk}/").content.decode()
    assert f'action="/hosts/{host.pk}/extend/"' in page
    response = client.post(f"/hosts/{host.pk}/extend/", {"hours": "3"}, follow=True)
    assert "Lease extended by 3 h" in response.content.decode()
    host.refresh_from_db()
    assert host.lease_extended_hours == 3
    panel = client.post(
        f"/hosts/{host.pk}/extend/",
        {"hours": "500"},
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="host-panel",
    )
    assert panel.status_code == 409
    assert "Lease limit" in panel.content.decode()


def test_the_spot_rate_prices_a_spot_extension(clock, ada, alice, catalog, projects, running_host):
    from django.utils import timezone

    from instances.models import InstanceType

    InstanceType.objects.filter(pk=catalog["g5.xlarge"].pk).update(
        spot_price_per_hour=Decimal("0.30"), spot_price_at=timezone.now()
    )
    host = running_host(market="spot", lease_hours=8)  # commits 8 h x $0.30 = $2.40
    budget_set(project=projects["vision-lab"], actor=ada, monthly_amount="5.00", policy="block_all")
    services.instance_extend_lease(instance=host, user=alice, hours=8)  # $2.40 of $2.60 left
    with pytest.raises(Exception) as refused:
        services.instance_extend_lease(instance=host, user=alice, hours=1)
    assert getattr(refused.value, "code", "") == "budget_exceeded"


def test_extensions_and_warnings_are_audited_and_in_the_schema(
    clock, alice, running_host, api_as, passes
):
    from audit.models import AuditEvent

    host = running_host(lease_hours=8)
    assert _extend(api_as, alice, host, 2).status_code == 200
    assert _extend(api_as, alice, host, 500).status_code == 409
    calls = AuditEvent.objects.filter(path=f"/api/v1/instances/{host.pk}/extend/")
    assert sorted(calls.values_list("actor_username", "status")) == [("alice", 200), ("alice", 409)]
    assert {row.object_ref for row in calls} == {f"instance:{host.pk}"}
    host.refresh_from_db()
    clock.move_to(host.lease_expires_at - timedelta(minutes=30))
    passes()
    warning = AuditEvent.objects.get(actor_username="system:lease", action="note")
    assert warning.object_ref == f"instance:{host.pk}"
    schema = api_as(alice).get("/api/v1/schema/?format=json").json()
    extend = schema["paths"]["/api/v1/instances/{id}/extend/"]["post"]
    assert "409" in extend["responses"]
    assert "/api/v1/orders/{id}/cancel/" in schema["paths"]
