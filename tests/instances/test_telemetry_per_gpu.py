"""Each GPU's own reading: an agent sends it beside the host's totals, the portal holds it to
the host's type and to the totals (400 with a code and a sentence, nothing stored), keeps it
on the minute's row, folds it into the hour, serves it as one column per GPU, and the
simulated cloud reports it for every GPU of a host."""

from __future__ import annotations

from datetime import timedelta

import pytest

from instances import services
from instances.models import GpuHourlyReading, GpuReading
from instances.providers.gpu_profile import gpu_sample, profile_of

pytestmark = pytest.mark.django_db
MINUTE = timedelta(minutes=1)
A100_MIB = 40 * 1024  # p4d.24xlarge: 8x A100 of 40 GiB


@pytest.fixture
def eight_gpu_host(running_host, catalog):
    return running_host(instance_type=catalog["p4d.24xlarge"])


def _agent(api, instance):
    secret = services.agent_credential_issue(instance=instance)
    api.credentials(HTTP_AUTHORIZATION=f"Agent {secret}")
    return api


def _post(api, instance, *readings):
    return api.post(
        f"/api/v1/instances/{instance.pk}/metrics/", {"readings": list(readings)}, format="json"
    )


def gpu(index: int, utilization: int = 90, used: int = 30_000, total: int = A100_MIB) -> dict:
    return {
        "index": index,
        "utilization": utilization,
        "memory_used_mib": used,
        "memory_total_mib": total,
    }


def reading(clock, gpus: list[dict], *, minutes_ago: int = 1, **totals) -> dict:
    """A reading as the agent builds it: the totals are the GPUs' mean and sum unless told."""
    body = {
        "at": (clock.now - minutes_ago * MINUTE).isoformat(),
        "utilization": round(sum(g["utilization"] for g in gpus) / len(gpus)) if gpus else 0,
        "memory_used_mib": sum(g["memory_used_mib"] for g in gpus),
        "gpus": gpus,
    }
    body.update(totals)
    return body


def test_an_agent_posts_each_gpus_reading_and_it_is_kept_on_the_minutes_row(
    clock, api, eight_gpu_host
):
    gpus = [gpu(n, utilization=80 + n, used=20_000 + n) for n in range(8)]
    answer = _post(_agent(api, eight_gpu_host), eight_gpu_host, reading(clock, gpus))
    assert answer.status_code == 201, answer.content
    row = GpuReading.objects.get()
    assert (row.utilization, row.memory_used_mib) == (84, 160_028)
    assert row.gpus == [[n, 80 + n, 20_000 + n, A100_MIB] for n in range(8)]


def test_a_host_may_list_fewer_gpus_than_it_has_in_any_order(clock, api, eight_gpu_host):
    # A GPU that fell off the bus is missing from nvidia-smi's list: the others still count.
    gpus = [gpu(5, 70), gpu(2, 90)]
    answer = _post(_agent(api, eight_gpu_host), eight_gpu_host, reading(clock, gpus))
    assert answer.status_code == 201, answer.content
    assert GpuReading.objects.get().gpus == [[2, 90, 30_000, A100_MIB], [5, 70, 30_000, A100_MIB]]


def test_an_older_agent_that_sends_only_the_totals_still_posts(clock, api, eight_gpu_host):
    body = {"at": clock.now.isoformat(), "utilization": 50, "memory_used_mib": 1_000}
    answer = _post(_agent(api, eight_gpu_host), eight_gpu_host, body)
    assert answer.status_code == 201, answer.content
    assert GpuReading.objects.get().gpus == []


@pytest.mark.parametrize("utilization", [90, 91])
def test_the_hosts_utilization_may_round_the_gpus_mean_either_way(
    clock, api, eight_gpu_host, utilization
):
    gpus = [gpu(0, 90), gpu(1, 91)]  # mean 90.5
    body = reading(clock, gpus, utilization=utilization)
    assert _post(_agent(api, eight_gpu_host), eight_gpu_host, body).status_code == 201


BAD = {
    "more GPUs than the host has": (
        [gpu(n) for n in range(9)],
        {},
        "too_many_gpus",
        "gpus lists 9 GPUs; this host has 8",
    ),
    "an index twice": (
        [gpu(0), gpu(3), gpu(3)],
        {},
        "gpu_index_repeated",
        "GPU 3 is listed more than once",
    ),
    "an index past the host's GPUs": (
        [gpu(0), gpu(8)],
        {},
        "gpu_index_out_of_range",
        "GPU index 8 is out of range; this host's GPUs are 0 to 7",
    ),
    "a negative index": (
        [gpu(-1)],
        {},
        "min_value",
        "readings.1.gpus.0.index: Ensure this value is greater than or equal to 0.",
    ),
    "a GPU over 100 %": (
        [gpu(0, utilization=101)],
        {"utilization": 100},
        "max_value",
        "readings.1.gpus.0.utilization: Ensure this value is less than or equal to 100.",
    ),
    "more memory used than the GPU has": (
        [gpu(0, used=A100_MIB + 1)],
        {},
        "gpu_memory_over_total",
        "GPU 0: memory_used_mib 40961 must be between 0 and its memory_total_mib 40960",
    ),
    "a total no A100 of this host has": (
        [gpu(0, used=1_000, total=81_920)],
        {},
        "gpu_memory_total_out_of_range",
        "GPU 0: memory_total_mib 81920 is not this host's GPU memory (40 GiB each, 41984 MiB "
        "at most)",
    ),
    "a total of nothing": (
        [gpu(0, used=0, total=0)],
        {},
        "min_value",
        "readings.1.gpus.0.memory_total_mib: Ensure this value is greater than or equal to 1.",
    ),
    "a mean the GPUs do not have": (
        [gpu(0, 90), gpu(1, 91)],
        {"utilization": 92},
        "utilization_disagrees",
        "utilization 92 is not the GPUs' mean (90.5, rounded)",
    ),
    "memory the GPUs do not sum to": (
        [gpu(0, used=100), gpu(1, used=200)],
        {"memory_used_mib": 301},
        "memory_disagrees",
        "memory_used_mib 301 is not the GPUs' memory summed (300)",
    ),
    "an empty list": (
        [],
        {},
        "min_length",
        "readings.1.gpus.non_field_errors: List at least one GPU, or leave gpus out.",
    ),
    "a GPU without its total": (
        [{"index": 0, "utilization": 5, "memory_used_mib": 5}],
        {"utilization": 5, "memory_used_mib": 5},
        "required",
        "readings.1.gpus.0.memory_total_mib: This field is required.",
    ),
    "a field the portal does not keep": (
        [{**gpu(0), "temperature_c": 71}],
        {},
        "unknown_field",
        "readings.1.gpus.0.temperature_c",
    ),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_a_bad_gpu_list_is_refused_with_a_code_and_a_sentence_and_nothing_is_stored(
    clock, api, eight_gpu_host, case
):
    gpus, totals, code, sentence = BAD[case]
    good = reading(clock, [gpu(0)], minutes_ago=2)
    answer = _post(
        _agent(api, eight_gpu_host), eight_gpu_host, good, reading(clock, gpus, **totals)
    )
    assert answer.status_code == 400, answer.content
    body = answer.json()
    assert body["code"] == code
    assert sentence in body["detail"]
    assert all(name.startswith("readings.1") for name in body["fields"])
    assert not GpuReading.objects.exists()


def test_a_one_gpu_host_takes_one_gpu_at_index_0(clock, api, running_host):
    host = running_host()  # g5.xlarge: one A10G of 24 GiB
    agent = _agent(api, host)
    two = reading(clock, [gpu(0, total=23_028, used=1), gpu(1, total=23_028, used=1)])
    answer = _post(agent, host, two)
    assert answer.status_code == 400
    assert answer.json()["detail"] == "readings.0: gpus lists 2 GPUs; this host has 1"
    # nvidia-smi's A10G has 23,028 MiB of the 24 GiB the catalog sells.
    answer = _post(agent, host, reading(clock, [gpu(0, total=23_028, used=9_000)]))
    assert answer.status_code == 201, answer.content


def test_the_series_has_a_column_per_gpu_aligned_with_its_points(
    clock, api, api_as, eight_gpu_host, alice
):
    agent = _agent(api, eight_gpu_host)
    old = {"at": (clock.now - 3 * MINUTE).isoformat(), "utilization": 40, "memory_used_mib": 9}
    newer = reading(clock, [gpu(0, 60, used=10), gpu(1, 80, used=20)], minutes_ago=2)
    newest = reading(clock, [gpu(1, 90, used=30)], minutes_ago=1)
    assert _post(agent, eight_gpu_host, old, newer, newest).status_code == 201
    api.credentials()
    body = api_as(alice).get(f"/api/v1/instances/{eight_gpu_host.pk}/metrics/").json()
    assert [p["utilization"] for p in body["points"]] == [40, 70, 90]
    assert body["gpus"] == [
        {
            "index": 0,
            "memory_total_mib": A100_MIB,
            "utilization": [None, 60, None],
            "memory_used_mib": [None, 10, None],
        },
        {
            "index": 1,
            "memory_total_mib": A100_MIB,
            "utilization": [None, 80, 90],
            "memory_used_mib": [None, 20, 30],
        },
    ]


def test_a_series_without_gpu_values_has_no_columns(clock, api_as, running_host, alice):
    host = running_host()
    GpuReading.objects.create(
        instance=host, minute=clock.now - MINUTE, utilization=5, memory_used_mib=5
    )
    body = api_as(alice).get(f"/api/v1/instances/{host.pk}/metrics/").json()
    assert len(body["points"]) == 1 and body["gpus"] == []


def test_an_hour_keeps_each_gpus_mean_peak_and_most_memory(
    clock, settings, api_as, eight_gpu_host, alice
):
    settings.PORTAL_TELEMETRY_MINUTE_RETENTION_HOURS = 2
    hour = clock.now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    # 11:00-11:59: GPU 0 at 10 % then 30 % (half the hour each), GPU 1 at 50 % with a spike;
    # 11:40 came from an older agent, with no GPU values.
    rows = []
    for minute in range(60):
        at = hour + minute * MINUTE
        if minute == 40:
            rows.append(
                GpuReading(instance=eight_gpu_host, minute=at, utilization=1, memory_used_mib=1)
            )
            continue
        first = 10 if minute < 30 else 30
        second = 100 if minute == 7 else 50
        rows.append(
            GpuReading(
                instance=eight_gpu_host,
                minute=at,
                utilization=(first + second) // 2,
                memory_used_mib=1_000 + minute * 2,
                gpus=[[0, first, 1_000 + minute, A100_MIB], [1, second, minute, A100_MIB]],
            )
        )
    GpuReading.objects.bulk_create(rows, batch_size=60)
    clock.shift(timedelta(hours=4))
    assert services.telemetry_compact() == 1
    folded = GpuHourlyReading.objects.get(instance=eight_gpu_host)
    assert folded.minutes == 60
    # GPU 0: 30 minutes at 10 and 29 at 30 (11:40 had none), a mean of 20 (19.8 rounded);
    # GPU 1: 58 at 50 and one at 100, 51 (50.8).
    assert folded.gpus == [[0, 20, 30, 1_059, A100_MIB], [1, 51, 100, 59, A100_MIB]]
    body = api_as(alice).get(f"/api/v1/instances/{eight_gpu_host.pk}/metrics/").json()
    assert body["points"][0]["resolution"] == "hour"
    assert [g["utilization"] for g in body["gpus"]] == [[20], [51]]
    assert [g["memory_used_mib"] for g in body["gpus"]] == [[1_059], [59]]


def test_an_hour_without_any_gpu_values_keeps_none(clock, settings, eight_gpu_host):
    settings.PORTAL_TELEMETRY_MINUTE_RETENTION_HOURS = 2
    GpuReading.objects.create(
        instance=eight_gpu_host, minute=clock.now, utilization=5, memory_used_mib=5
    )
    clock.shift(timedelta(hours=4))
    assert services.telemetry_compact() == 1
    assert GpuHourlyReading.objects.get().gpus == []


def test_the_simulated_cloud_reports_every_gpu_of_a_host(clock, eight_gpu_host):
    clock.shift(MINUTE)
    assert services.telemetry_collect().stored == 1
    row = GpuReading.objects.get(instance=eight_gpu_host)
    assert [g[0] for g in row.gpus] == list(range(8))
    assert {g[3] for g in row.gpus} == {A100_MIB}
    # The totals are the GPUs' own, as an agent's are.
    assert row.memory_used_mib == sum(g[2] for g in row.gpus)
    assert abs(row.utilization * 8 - sum(g[1] for g in row.gpus)) < 8


def test_a_simulated_hosts_gpus_differ_but_share_its_busy_and_idle_phases(clock):
    args = dict(
        seed=7,
        cloud_id="i-8",
        profile=profile_of("30:30", now=clock.now),
        launched_at=clock.now,
        gpu_count=8,
        gpu_memory_gib=80,
    )
    busy = gpu_sample(minute=clock.now + 5 * MINUTE, **args)
    assert busy == gpu_sample(minute=clock.now + 5 * MINUTE, **args)
    assert all(85 <= g.utilization <= 100 for g in busy.gpus)
    assert len({g.utilization for g in busy.gpus}) > 3  # eight lines, not one drawn eight times
    assert all(0.6 * 80 * 1024 <= g.memory_used_mib <= 0.9 * 80 * 1024 for g in busy.gpus)
    idle = gpu_sample(minute=clock.now + 35 * MINUTE, **args)
    assert all(g.utilization < 5 for g in idle.gpus)
    assert idle.utilization < 5 and busy.utilization >= 85
