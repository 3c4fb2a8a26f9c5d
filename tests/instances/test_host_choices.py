"""What a host's page offers does what it says, for the hosts that are not plain orders: a
pool's host, a job's, a MIG slice and its shared host. Found by reading each page's claims
against the code: Stop and Extend on a pool host (its pool ended a stopped host; its lease is
never extended), confirmations that said "deleted" for a slice given back or left out a job's
recovery, Extend on a job's host silent on the job's time limit, an ssh command for a job
ordered without a key, a shared host's interruption promising a replacement."""

from __future__ import annotations

from datetime import timedelta

import pytest

from instances import services, tasks
from instances.models import Image, Instance, Job
from instances.services.jobs import job_submit
from instances.services.spot_recovery import spot_takeback
from tests.conftest import ED25519


@pytest.fixture
def job_host(alice, catalog, projects):
    def make(**fields) -> tuple[Job, Instance]:
        job = job_submit(
            requester=alice,
            project=projects["vision-lab"],
            instance_type=catalog["g5.xlarge"],
            image=Image.objects.get(name="tf-2.17-cuda12.3"),
            market="on_demand",
            name="train",
            command="python train.py",
            time_limit_minutes=90,
            **fields,
        )
        host = services.instance_provision(instance_id=job.order.instances.get().pk)
        return Job.objects.get(pk=job.pk), Instance.objects.with_detail().get(pk=host.pk)

    return make


def confirms(host: Instance) -> dict[str, str]:
    host = Instance.objects.with_detail().select_related("pool").get(pk=host.pk)
    return {action.name: action.confirm for action in host.actions_now}


def test_a_pool_host_is_neither_stopped_nor_extended_and_its_page_says_why(
    make_pool, api_as, alice, client
):
    make_pool(desired=1)
    services.autoscale()
    host = services.instance_provision(instance_id=Instance.objects.get().pk)
    assert host.status == Instance.Status.RUNNING and host.market == "on_demand"
    assert list(confirms(host)) == ["terminate"]
    assert "pool trainers, which launches a replacement" in confirms(host)["terminate"]
    stop = api_as(alice).post(f"/api/v1/instances/{host.pk}/stop/")
    assert stop.status_code == 409 and stop.json()["code"] == "pool_host_cannot_stop"
    assert "its pool would end a stopped host" in stop.json()["detail"]
    extend = api_as(alice).post(f"/api/v1/instances/{host.pk}/extend/", {"hours": 1})
    assert extend.status_code == 409 and extend.json()["code"] == "pool_host_lease"
    row = Instance.objects.get(pk=host.pk)
    assert row.status == Instance.Status.RUNNING and row.lease_extended_hours == 0
    client.force_login(alice)
    page = client.get(f"/hosts/{host.pk}/").content.decode()
    assert 'class="row extend-lease"' not in page
    assert "its pool launches a fresh host in its place" in page
    assert ">Stop<" not in page and ">Terminate<" in page
    assert f'href="/pools/{host.pool_id}/">trainers</a>' in page


def test_a_job_host_names_its_job_and_says_what_stop_terminate_and_extend_do(
    job_host, api_as, alice, client
):
    job, host = job_host(ssh_public_key=ED25519)
    assert job.status == Job.Status.PENDING
    # Pending: the plain words (nothing of the job runs on it yet).
    assert confirms(host)["stop"].startswith("Its disk is kept")
    Job.objects.filter(pk=job.pk).update(status=Job.Status.RUNNING, host=host)
    said = confirms(host)
    assert said["stop"] == (
        "Job train's run ends with it and the job starts again on a new host (a recovery, "
        "billed as it runs); this one stays stopped, its disk billed, until the job ends. To "
        "end the job, cancel it instead."
    )
    assert "this host and its disk are deleted" in said["terminate"]
    Job.objects.filter(pk=job.pk).update(max_recoveries=1, recoveries=1)
    assert "the job fails, its 1 recoveries used up" in confirms(host)["terminate"]
    client.force_login(alice)
    page = client.get(f"/hosts/{host.pk}/").content.decode()
    assert 'class="row extend-lease"' in page
    assert "job train's own time limit (90 min) does not grow with it" in page
    assert f'href="/jobs/{job.pk}/">train</a>' in page and "up to 90 min" in page
    assert f"ssh ubuntu@{host.public_ip}" in page


def test_a_job_ordered_without_a_key_offers_no_ssh_command(job_host, api_as, alice, client):
    job, host = job_host()
    assert host.status == Instance.Status.RUNNING and host.public_ip
    assert host.ssh_command is None
    assert api_as(alice).get(f"/api/v1/instances/{host.pk}/").json()["ssh_command"] is None
    client.force_login(alice)
    page = client.get(f"/hosts/{host.pk}/").content.decode()
    assert "ssh ubuntu@" not in page and "ssh -L" not in page
    assert "It was ordered without an SSH key, so it has no SSH login" in page
    assert f'<a href="/jobs/{job.pk}/">job train\'s page</a>' in page


def test_a_slice_given_back_says_so_and_a_warned_shared_host_promises_no_replacement(
    place_order, alice, catalog, clock, settings
):
    settings.PORTAL_SIMULATED_AGENTS = True  # slice sessions: the simulated agents run them
    slice_ = place_order(
        alice, instance_type=catalog["p4d.24xlarge"], mig_profile="1g.5gb"
    ).instances.get()
    tasks.provision_instance.apply(args=[str(slice_.pk)])
    said = confirms(slice_)
    assert list(said) == ["terminate"]
    assert said["terminate"].startswith("The slice is given back")
    assert "deleted" not in said["terminate"].split(":")[0]
    shared = Instance.objects.get(order__mig_host=True)
    shared.spot_warning_at = clock.now
    shared.spot_interruption_at = clock.now + timedelta(minutes=2)
    takeback = spot_takeback(shared)
    assert "the shared host itself is not replaced" in takeback.next
    assert "Replacement" not in takeback.next and "starts at once" not in takeback.next


def test_a_spot_pool_hosts_checkpoint_line_says_its_pools_next_host_resumes(
    make_pool, alice, client
):
    """A pool replaces a host the cloud takes back whatever its policy (notify: once it is
    gone), and its hosts share the pool's order and so its checkpoint location."""
    from instances.services.spot_recovery import _checkpoint_line

    make_pool(desired=1, spot_percent=100, interruption_policy="notify")
    services.autoscale()
    host = services.instance_provision(instance_id=Instance.objects.get().pk)
    assert host.market == "spot"
    assert host.order.interruption_policy == "notify"  # the pool's launch order: as the pool
    assert _checkpoint_line(host).endswith(
        "the replacement gets the same location, so work saved there resumes."
    )
    client.force_login(alice)
    page = client.get(f"/hosts/{host.pk}/").content.decode()
    assert "a replacement after an interruption gets the same location" in page
    assert "a host you order again can read it" not in page
