"""The idle stop: a host whose simulated GPUs go idle is warned, Keep running holds it, and
without it the host stops at the minute the warning announced."""

from __future__ import annotations

from datetime import timedelta

import pytest

from audit.models import AuditEvent
from instances import services
from instances.models import IdlePolicy, Image, Instance
from instances.providers.gpu_profile import profile_of
from instances.providers.simulated import SimulatedProvider
from portal.models import Notice

pytestmark = pytest.mark.django_db
MINUTE = timedelta(minutes=1)


@pytest.fixture
def idle_policy(projects):
    return IdlePolicy.objects.create(
        project=projects["vision-lab"],
        threshold_percent=10,
        idle_minutes=30,
        warning_minutes=5,
        snooze_hours=2,
    )


def _profile(host: Instance, spec: str, clock) -> None:
    SimulatedProvider().set_gpu_profile(host.cloud_id, profile_of(spec, now=clock.now))


def _minutes(clock, count: int) -> services.IdleReport:
    """Let ``count`` minutes pass as beat does: a reading, then an idle pass, each minute."""
    total = services.IdleReport()
    for _ in range(count):
        clock.shift(MINUTE)
        services.telemetry_collect()
        report = services.idle_check()
        total.warned += report.warned
        total.stopped += report.stopped
        total.cleared += report.cleared
    return total


def _status(host) -> str:
    return Instance.objects.get(pk=host.pk).status


def test_a_host_whose_gpus_go_idle_is_warned_then_stopped_at_the_announced_minute(
    clock, running_host, idle_policy, alice
):
    host = running_host()
    _profile(host, "10:600", clock)  # ten busy minutes, then idle
    assert _minutes(clock, 30).warned == []  # 10 busy + 20 idle: not yet
    report = _minutes(clock, 6)
    assert report.warned == [str(host.pk)]
    row = Instance.objects.get(pk=host.pk)
    warned_at, stop_at = row.idle_warned_at, row.idle_stop_at
    assert stop_at == (warned_at + 5 * MINUTE).replace(second=0, microsecond=0)
    notice = Notice.objects.get(user=alice)
    assert f"will be stopped at {stop_at:%H:%M} UTC" in notice.body
    assert "idle for 24 minutes" in notice.body
    assert notice.link.endswith(f"/hosts/{host.pk}/#keep-running")

    minutes_left = int((stop_at - clock.now) / MINUTE)
    assert _minutes(clock, minutes_left - 1).stopped == []
    assert _status(host) == Instance.Status.RUNNING
    assert _minutes(clock, 1).stopped == [str(host.pk)]
    assert clock.now == stop_at
    row = Instance.objects.get(pk=host.pk)
    assert row.status == Instance.Status.STOPPING
    assert row.idle_stop_at is None
    assert "idle: GPU below 10 %" in row.status_reason
    actors = list(row.events.values_list("actor", flat=True))
    assert actors.count("system:idle_stop") == 2  # the warning, then the stop
    audited = AuditEvent.objects.filter(object_ref=f"instance:{host.pk}")
    assert audited.filter(actor_username="system:idle_stop").count() >= 2


def test_keep_running_holds_an_idle_host_past_the_announced_minute(
    clock, running_host, idle_policy, alice
):
    host = running_host()
    _profile(host, "idle", clock)
    assert _minutes(clock, 26).warned == [str(host.pk)]
    row = services.instance_keep_running(instance=Instance.objects.get(pk=host.pk), user=alice)
    assert row.idle_snoozed_until == clock.now + timedelta(hours=2)
    assert row.idle_stop_at is None
    report = _minutes(clock, 60)
    assert report.stopped == [] and report.warned == []
    assert _status(host) == Instance.Status.RUNNING
    assert row.events.filter(actor="user:alice", reason__startswith="Keep running").exists()
    # When the snooze ends the policy applies again, with a new warning first.
    assert _minutes(clock, 61).warned == [str(host.pk)]


def test_a_host_that_works_again_after_the_warning_is_not_stopped(clock, running_host, idle_policy):
    host = running_host()
    _profile(host, "idle", clock)
    assert _minutes(clock, 26).warned == [str(host.pk)]
    _profile(host, "busy", clock)
    report = _minutes(clock, 10)
    assert report.cleared == [str(host.pk)] and report.stopped == []
    assert Instance.objects.get(pk=host.pk).idle_stop_at is None


def test_a_host_without_telemetry_is_never_judged_idle(clock, running_host, idle_policy):
    host = running_host()
    for _ in range(90):
        clock.shift(MINUTE)
        assert services.idle_check().warned == []
    assert _status(host) == Instance.Status.RUNNING


def test_a_warned_host_whose_readings_stop_is_not_stopped(clock, running_host, idle_policy):
    host = running_host()
    _profile(host, "idle", clock)
    assert _minutes(clock, 26).warned == [str(host.pk)]
    cleared = []
    for _ in range(10):
        clock.shift(MINUTE)
        report = services.idle_check()  # no readings any more
        assert report.stopped == []
        cleared += report.cleared
    assert cleared == [str(host.pk)]
    assert _status(host) == Instance.Status.RUNNING
    assert Instance.objects.get(pk=host.pk).idle_stop_at is None


def test_an_idle_spot_host_is_terminated_not_stopped(clock, running_host, idle_policy):
    host = running_host(market="spot", interruption_policy="notify")
    _profile(host, "idle", clock)
    _minutes(clock, 31)
    assert _status(host) == Instance.Status.TERMINATING


def test_projects_without_a_policy_never_stop_idle_hosts(clock, running_host):
    host = running_host()
    _profile(host, "idle", clock)
    assert _minutes(clock, 90).warned == []
    assert _status(host) == Instance.Status.RUNNING


def test_a_stranger_cannot_keep_someone_elses_host_running(running_host, idle_policy, carol):
    from portal.lib.errors import Forbidden

    with pytest.raises(Forbidden):
        services.instance_keep_running(instance=running_host(), user=carol)


def test_keep_running_without_an_idle_policy_says_there_is_none(running_host, alice):
    from portal.lib.errors import Conflict

    with pytest.raises(Conflict, match="no idle stop"):
        services.instance_keep_running(instance=running_host(), user=alice)


def test_beat_runs_the_telemetry_and_idle_tasks_by_name(settings, clock, running_host, idle_policy):
    from portal.celery import app

    names = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    for task in (
        "instances.tasks.collect_telemetry",
        "instances.tasks.compact_telemetry",
        "instances.tasks.stop_idle_hosts",
    ):
        assert task in names and task in app.tasks
    host = running_host()
    _profile(host, "idle", clock)
    for _ in range(31):
        clock.shift(MINUTE)
        assert app.tasks["instances.tasks.collect_telemetry"]() == 1
        app.tasks["instances.tasks.stop_idle_hosts"]()
    assert _status(host) == Instance.Status.STOPPING


def test_keeping_a_host_running_from_the_api_is_audited(api_as, running_host, idle_policy, alice):
    host = running_host()
    assert api_as(alice).post(f"/api/v1/instances/{host.pk}/keep-running/").status_code == 200
    row = AuditEvent.objects.filter(path=f"/api/v1/instances/{host.pk}/keep-running/").get()
    assert row.actor_username == "alice" and row.status == 200


def test_a_warning_ends_with_the_policy_or_when_the_host_stops_another_way(
    clock, running_host, idle_policy, alice
):
    host = running_host()
    _profile(host, "idle", clock)
    assert _minutes(clock, 26).warned == [str(host.pk)]
    idle_policy.enabled = False
    idle_policy.save()
    assert services.idle_check().cleared == [str(host.pk)]
    idle_policy.enabled = True
    idle_policy.save()
    assert _minutes(clock, 1).warned == [str(host.pk)]
    services.instance_request_stop(instance=Instance.objects.get(pk=host.pk), user=alice)
    services.idle_check()
    assert Instance.objects.get(pk=host.pk).idle_stop_at is None


def test_the_idle_warning_notice_has_its_own_keep_running_button(
    clock, running_host, idle_policy, alice, client
):
    host = running_host()
    _profile(host, "idle", clock)
    assert _minutes(clock, 26).warned == [str(host.pk)]
    client.force_login(alice)
    page = client.get("/dashboard/").content.decode()
    action = f"/hosts/{host.pk}/keep-running/"
    assert f'action="{action}"' in page
    assert ">Keep running</button>" in page
    answer = client.post(action, {"next": "/dashboard/"})
    assert answer.status_code == 302 and answer["Location"] == "/dashboard/"
    row = Instance.objects.get(pk=host.pk)
    assert row.idle_stop_at is None
    assert row.idle_snoozed_until == clock.now + timedelta(hours=2)
    assert _minutes(clock, 30).stopped == []


def test_the_keep_running_button_leaves_the_notice_once_the_stop_time_has_passed(
    clock, running_host, idle_policy, alice, client
):
    host = running_host()
    _profile(host, "idle", clock)
    assert _minutes(clock, 26).warned == [str(host.pk)]
    stop_at = Instance.objects.get(pk=host.pk).idle_stop_at
    client.force_login(alice)
    assert ">Keep running</button>" in client.get("/dashboard/").content.decode()
    clock.shift(stop_at - clock.now)
    page = client.get("/dashboard/").content.decode()
    assert "will be stopped at" in page  # the notice stays, its button goes
    assert ">Keep running</button>" not in page


def test_the_idle_warning_never_says_longer_than_the_host_has_run(
    clock, projects, running_host, alice, client
):
    IdlePolicy.objects.create(
        project=projects["vision-lab"],
        threshold_percent=10,
        idle_minutes=3,
        warning_minutes=1,
        snooze_hours=2,
    )
    host = running_host()
    _profile(host, "idle", clock)
    services.telemetry_collect()  # its first minute's reading reaches back before it ran
    clock.shift(timedelta(seconds=70))
    services.telemetry_collect()
    assert services.idle_check().warned == [str(host.pk)]
    assert "has been idle for 70 seconds (GPU below 10 %)" in Notice.objects.get(user=alice).body
    client.force_login(alice)
    page = client.get(f"/hosts/{host.pk}/").content.decode()
    assert "have been below 10 % for 70 seconds (warned" in page


def test_the_hosts_the_idle_stop_leaves_alone_say_why_and_cannot_be_kept_running(
    running_host,
    idle_policy,
    alice,
    ada,
    catalog,
    projects,
    place_order,
    api_as,
    client,
    settings,
    make_pool,
):
    """A pool's host, a job's, a MIG slice and its shared host are never stopped for being idle:
    their page says why instead of the project's policy, and Keep running is refused with the
    same sentence, changing nothing. The page's rule is the pass's (idle_watched)."""
    from instances import tasks
    from instances.services.idle import idle_exemption, idle_watched
    from instances.services.jobs import job_submit

    settings.PORTAL_SIMULATED_AGENTS = True
    vision = projects["vision-lab"]
    image = Image.objects.get(name="tf-2.17-cuda12.3")
    pool = make_pool(desired=1)
    services.autoscale()  # launches the pool's host
    job = job_submit(
        requester=alice,
        project=vision,
        instance_type=catalog["g5.xlarge"],
        image=image,
        market="on_demand",
        name="train",
        command="python train.py",
    )
    slice_ = place_order(
        alice, instance_type=catalog["p4d.24xlarge"], mig_profile="1g.5gb"
    ).instances.get()
    tasks.provision_instance.apply(args=[str(slice_.pk)])
    hosts = {
        "plain": (running_host(), None),
        "pool": (Instance.objects.get(pool=pool), "its pool scales in idle hosts instead"),
        "job": (job.order.instances.get(), "its job ends it when the job ends"),
        "slice": (Instance.objects.get(pk=slice_.pk), "a MIG slice is given back, never stopped"),
        "shared host": (
            Instance.objects.get(order__mig_host=True),
            "a shared MIG host ends once no slice has used it for",
        ),
    }
    for kind, (host, why) in hosts.items():
        exemption = idle_exemption(host)
        watched = Instance.objects.filter(pk=host.pk).filter(idle_watched()).exists()
        assert watched == (exemption is None), kind
        assert (exemption or "").startswith(why or ""), (kind, exemption)
    client.force_login(ada)
    for kind, (host, why) in hosts.items():
        shown = client.get(f"/hosts/{host.pk}/").content.decode()
        if why:
            assert f"never: {why}" in shown, kind
        else:
            assert "below 10 % for 30 min" in shown
    for kind in ("pool", "job", "slice"):
        host = hosts[kind][0]
        response = api_as(alice).post(f"/api/v1/instances/{host.pk}/keep-running/")
        assert response.status_code == 409, (kind, response.content)
        assert response.json()["code"] == "idle_exempt"
        assert response.json()["detail"].startswith(
            "This host is never stopped for being idle: " + hosts[kind][1]
        )
        assert Instance.objects.get(pk=host.pk).idle_snoozed_until is None
