"""GPU telemetry: readings from the simulated cloud and from a host's agent, what is refused
and why, the series in the API, and the hourly summaries after the retention period."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from instances import services
from instances.models import GpuHourlyReading, GpuReading, HostAgentCredential, Instance
from instances.providers.gpu_profile import gpu_sample, profile_of
from instances.providers.simulated import SimulatedProvider

pytestmark = pytest.mark.django_db
MINUTE = timedelta(minutes=1)


def _agent(api, instance):
    secret = services.agent_credential_issue(instance=instance)
    api.credentials(HTTP_AUTHORIZATION=f"Agent {secret}")
    return api


def _post(api, instance, *readings):
    return api.post(
        f"/api/v1/instances/{instance.pk}/metrics/", {"readings": list(readings)}, format="json"
    )


def test_the_simulated_profile_gives_the_same_reading_for_the_same_minute(clock):
    profile = profile_of("30:30", now=clock.now)
    args = dict(
        seed=7,
        cloud_id="i-1",
        profile=profile,
        launched_at=clock.now,
        gpu_count=1,
        gpu_memory_gib=24,
    )
    busy = gpu_sample(minute=clock.now + 5 * MINUTE, **args)
    assert busy == gpu_sample(minute=clock.now + 5 * MINUTE, **args)
    assert busy.utilization >= 85
    idle = gpu_sample(minute=clock.now + 35 * MINUTE, **args)
    assert idle.utilization < 5
    assert gpu_sample(minute=clock.now + 65 * MINUTE, **args).utilization >= 85


def test_every_running_host_reports_a_minute_and_a_repeat_replaces_it(clock, running_host):
    hosts = [running_host(), running_host()]
    SimulatedProvider().set_gpu_profile(hosts[0].cloud_id, profile_of("idle", now=clock.now))
    assert services.telemetry_collect().stored == 2
    assert services.telemetry_collect().stored == 2
    assert GpuReading.objects.count() == 2
    idle = GpuReading.objects.get(instance=hosts[0])
    assert idle.minute == clock.now.replace(second=0, microsecond=0)
    assert idle.utilization < 5


def test_ingest_takes_the_same_number_of_queries_for_few_and_many_hosts(clock, running_host):
    hosts = [running_host() for _ in range(12)]

    def queries(count: int) -> int:
        readings = [
            services.Reading(str(h.pk), clock.now, utilization=50, memory_used_mib=100)
            for h in hosts[:count]
        ]
        with CaptureQueriesContext(connection) as captured:
            report = services.readings_ingest(readings)
        assert report.stored == count
        return len(captured)

    assert queries(2) == queries(12) == 2


def test_a_hosts_agent_posts_its_readings(clock, api, running_host):
    host = running_host()
    answer = _post(
        _agent(api, host),
        host,
        {"at": (clock.now - 2 * MINUTE).isoformat(), "utilization": 40, "memory_used_mib": 900},
        {"at": (clock.now - MINUTE).isoformat(), "utilization": 60, "memory_used_mib": 1200},
    )
    assert answer.status_code == 201, answer.content
    assert answer.json() == {"stored": 2}
    assert list(GpuReading.objects.values_list("utilization", flat=True)) == [40, 60]
    assert HostAgentCredential.objects.get(instance=host).last_used_at is not None


def test_an_agent_cannot_post_for_another_host(api, running_host):
    mine, other = running_host(), running_host()
    answer = _post(
        _agent(api, mine),
        other,
        {"at": "2026-11-17T09:59:00Z", "utilization": 1, "memory_used_mib": 1},
    )
    assert answer.status_code == 403
    assert not GpuReading.objects.exists()


@pytest.mark.parametrize(
    "reading",
    [
        {"at": "2026-11-17T09:59:00Z", "utilization": 101, "memory_used_mib": 1},
        {"at": "2026-11-17T09:59:00Z", "utilization": -1, "memory_used_mib": 1},
        {"at": "yesterday", "utilization": 5, "memory_used_mib": 1},
        {"at": "2026-11-17T09:59:00Z", "utilization": "busy", "memory_used_mib": 1},
        {"utilization": 5, "memory_used_mib": 1},
    ],
)
def test_a_malformed_reading_is_refused_with_400_and_nothing_is_stored(
    clock, api, running_host, reading
):
    host = running_host()
    good = {"at": clock.now.isoformat(), "utilization": 5, "memory_used_mib": 1}
    answer = _post(_agent(api, host), host, good, reading)
    assert answer.status_code == 400
    assert not GpuReading.objects.exists()


def test_far_timestamps_are_refused_saying_which_and_near_future_is_clamped(
    clock, api, running_host
):
    host = running_host()
    agent = _agent(api, host)
    future = {
        "at": (clock.now + timedelta(hours=2)).isoformat(),
        "utilization": 5,
        "memory_used_mib": 1,
    }
    past = {
        "at": (clock.now - timedelta(days=30)).isoformat(),
        "utilization": 5,
        "memory_used_mib": 1,
    }
    answer = _post(agent, host, future, past)
    assert answer.status_code == 400
    errors = answer.json()
    assert "ahead of the portal's clock" in str(errors) and "older than" in str(errors)
    skewed = {
        "at": (clock.now + timedelta(seconds=90)).isoformat(),
        "utilization": 7,
        "memory_used_mib": 1,
    }
    assert _post(agent, host, skewed).status_code == 201
    assert GpuReading.objects.get().minute == clock.now.replace(second=0, microsecond=0)


def test_an_agent_credential_dies_with_its_host(clock, api, running_host, alice):
    host = running_host()
    agent = _agent(api, host)
    services.instance_request_terminate(instance=host, user=alice)
    services.instance_cloud_action(instance_id=host.pk, action="terminate")
    services.instance_sync(instance_id=host.pk)
    assert Instance.objects.get(pk=host.pk).status == Instance.Status.TERMINATED
    assert HostAgentCredential.objects.get(instance=host).revoked_at is not None
    answer = _post(
        agent, host, {"at": clock.now.isoformat(), "utilization": 5, "memory_used_mib": 1}
    )
    assert answer.status_code == 401


def test_an_agent_credential_opens_nothing_else(api, running_host):
    host = running_host()
    agent = _agent(api, host)
    assert agent.get(f"/api/v1/instances/{host.pk}/").status_code == 401
    assert agent.get(f"/api/v1/instances/{host.pk}/metrics/").status_code in (401, 403)


def test_the_secret_is_stored_only_as_a_digest_and_is_the_same_on_every_launch_retry(
    running_host,
):
    host = running_host()
    first = services.agent_credential_issue(instance=host)
    assert services.agent_credential_issue(instance=host) == first
    assert HostAgentCredential.objects.get(instance=host).digest != first
    assert first not in str(HostAgentCredential.objects.values().get())


def test_people_read_the_series_and_the_current_reading(clock, api_as, running_host, alice, carol):
    host = running_host()
    for _ in range(3):
        clock.shift(MINUTE)
        services.telemetry_collect()
    answer = api_as(alice).get(f"/api/v1/instances/{host.pk}/metrics/")
    assert answer.status_code == 200
    body = answer.json()
    assert len(body["points"]) == 3
    assert body["points"][-1]["resolution"] == "minute"
    assert body["gpu_utilization"] == body["points"][-1]["utilization"]
    detail = api_as(alice).get(f"/api/v1/instances/{host.pk}/").json()
    assert detail["gpu_utilization"] == body["gpu_utilization"]
    clock.shift(10 * MINUTE)
    assert api_as(alice).get(f"/api/v1/instances/{host.pk}/").json()["gpu_utilization"] is None
    assert api_as(carol).get(f"/api/v1/instances/{host.pk}/metrics/").status_code == 404


def test_old_minutes_become_hours_and_the_series_shows_both(
    clock, settings, api_as, running_host, alice
):
    settings.PORTAL_TELEMETRY_MINUTE_RETENTION_HOURS = 2
    host = running_host()
    for _ in range(180):
        clock.shift(MINUTE)
        services.telemetry_collect()
    assert services.telemetry_compact() == 1
    assert services.telemetry_compact() == 0  # a second pass finds nothing more
    hour = GpuHourlyReading.objects.get(instance=host)
    assert hour.minutes == 59  # 10:01 to 10:59: the host booted at 10:00
    assert GpuReading.objects.filter(minute__lt=hour.hour + timedelta(hours=1)).count() == 0
    points = api_as(alice).get(f"/api/v1/instances/{host.pk}/metrics/").json()["points"]
    assert points[0]["resolution"] == "hour"
    assert {p["resolution"] for p in points[1:]} == {"minute"}


def test_my_hosts_shows_the_current_reading(clock, client, running_host, alice):
    host = running_host()
    clock.shift(MINUTE)
    services.telemetry_collect()
    reading = GpuReading.objects.get(instance=host)
    client.force_login(alice)
    rows = client.get("/hosts/rows/").content.decode()
    assert f"{reading.utilization} %" in rows
    page = client.get(f"/hosts/{host.pk}/").content.decode()
    assert 'id="gpu-chart"' in page and f"/api/v1/instances/{host.pk}/metrics/" in page


def test_keep_running_in_the_api(api_as, running_host, alice, bob, projects):
    from instances.models import IdlePolicy

    IdlePolicy.objects.create(project=projects["vision-lab"], snooze_hours=3)
    host = running_host()
    assert api_as(bob).post(f"/api/v1/instances/{host.pk}/keep-running/").status_code == 403
    answer = api_as(alice).post(f"/api/v1/instances/{host.pk}/keep-running/")
    assert answer.status_code == 200
    assert Instance.objects.get(pk=host.pk).idle_snoozed_until is not None
    assert answer.json()["idle_snoozed_until"]


def test_managers_set_the_idle_policy_and_members_read_it(api_as, alice, ada, projects):
    url = "/api/v1/projects/vision-lab/idle-policy/"
    assert api_as(alice).get(url).json()["enabled"] is False
    assert api_as(alice).put(url, {"enabled": True}, format="json").status_code == 403
    answer = api_as(ada).put(
        url, {"enabled": True, "idle_minutes": 45, "warning_minutes": 10}, format="json"
    )
    assert answer.status_code == 200, answer.content
    assert answer.json()["idle_minutes"] == 45
    bad = api_as(ada).put(url, {"idle_minutes": 5, "warning_minutes": 10}, format="json")
    assert bad.status_code == 400
    # Said at the field the service names, as the page says it beside its input.
    assert list(bad.json()["fields"]) == ["warning_minutes"]
    assert "before the stop" in bad.json()["fields"]["warning_minutes"][0]
    assert api_as(ada).get(url).json()["idle_minutes"] == 45  # nothing changed
