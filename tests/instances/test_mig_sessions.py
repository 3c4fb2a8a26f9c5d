"""Two people's jobs on MIG slices of one shared host of the simulated cloud, really run: each
slice's agent is a process on this machine in a sandbox of its own (PID and mount namespaces),
started when the slice runs. Each job sees its own MIG device and nobody else's; its files and
checkpoints, and not the other tenant's; its own processes, and not the other's. The slice is
given back when its job ends, and its agent with it."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings

import instances
from instances import services, tasks
from instances.models import Image, Instance, Job, Notebook
from instances.providers.simulated_agents import host_agents
from instances.services.jobs import job_submit
from instances.services.mig import mig_host_follow
from tests.instances.test_job_execution import agents, log_of  # noqa: F401 (fixture)
from tests.workers import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

# What a curious tenant tries: its device, its files, and the other tenant's folder, checkpoints
# and processes (by the variables every process of the other tenant carries).
SPY = r"""
echo "device $CUDA_VISIBLE_DEVICES"
mkdir -p "$CHECKPOINT_DIR" && echo "secret of $WHO" > "$CHECKPOINT_DIR/secret"
echo "secret of $WHO" > notes.txt
for other in "$OTHER_FOLDER" "$OTHER_CHECKPOINTS"; do
  if [ -n "$other" ] && [ -e "$other" ]; then echo "sees $other"; fi
done
if [ -n "$OTHER_CHECKPOINTS" ]; then cat "$OTHER_CHECKPOINTS/secret" 2>/dev/null; fi
for environ in /proc/[0-9]*/environ; do
  tr '\0' '\n' < "$environ" 2>/dev/null | grep '^WHO=' | sed 's/^/tenant /'
done | sort -u
echo "secret of $WHO" > "/tmp/secret-of-$WHO"
if [ -n "$OTHER" ] && [ -e "/tmp/secret-of-$OTHER" ]; then echo "sees its /tmp"; fi
for hidden in "$HOSTS_ROOT" "$CHECKPOINTS_ROOT" /proc; do
  umount -l "$hidden" 2>/dev/null && echo "unmounted $hidden"
done
touch "$CODE/escaped" 2>/dev/null && echo "wrote the portal's code"
echo "processes $(ls -d /proc/[0-9]* | wc -l)"
sleep "$LINGER"
echo done
"""


def slice_job(user, projects, catalog, **env) -> Job:
    return job_submit(
        requester=user,
        project=projects["vision-lab"],
        instance_type=catalog["p4d.24xlarge"],
        image=Image.objects.get(name="tf-2.17-cuda12.3"),
        name=f"spy-{user.username}",
        market="on_demand",
        mig_profile="1g.5gb",
        time_limit_minutes=30,
        grace_seconds=2,
        command=SPY,
        env={
            "WHO": user.username,
            "LINGER": "0",
            "HOSTS_ROOT": str(host_agents().root),
            "CHECKPOINTS_ROOT": str(settings.PORTAL_CHECKPOINT_LOCAL_DIR),
            "CODE": str(Path(instances.__file__).parent),
            **env,
        },
    )


def launch(job: Job) -> Instance:
    """The job's slice placed, its shared host run, the slice followed: its session starts."""
    record = job.order.instances.get()
    tasks.provision_instance.apply(args=[str(record.pk)])
    record.refresh_from_db()
    host = record.held_slot.host
    if host.status != Instance.Status.RUNNING:
        services.instance_provision(instance_id=host.pk)
    mig_host_follow(host_id=host.pk)
    return Instance.objects.get(pk=record.pk)


def test_two_tenants_of_a_shared_host_see_only_their_own_device_files_and_processes(
    agents,  # noqa: F811
    alice,
    bob,
    projects,
    catalog,
    settings,
):
    settings.PORTAL_SIMULATED_AGENTS = True
    first = slice_job(alice, projects, catalog, LINGER="30")
    mine = launch(first)
    assert mine.status == Instance.Status.RUNNING
    wait_for(lambda: "processes" in log_of(first), what="alice's job to look around")
    mine_folder = host_agents().folder(mine.pk)
    checkpoints = first.order.checkpoint_uri.removeprefix("file://")
    second = slice_job(
        bob,
        projects,
        catalog,
        OTHER_FOLDER=str(mine_folder),
        OTHER_CHECKPOINTS=checkpoints,
        OTHER="alice",
    )
    theirs = launch(second)
    assert theirs.held_slot.host_id == mine.held_slot.host_id  # one shared host, two tenants
    wait_for(
        lambda: Job.objects.get(pk=second.pk).status == Job.Status.SUCCEEDED,
        timeout=45,
        what="bob's job to succeed",
    )
    seen = log_of(second)
    assert f"device {theirs.held_slot.device_uuid}" in seen
    assert mine.held_slot.device_uuid not in seen
    assert "tenant WHO=bob" in seen and "tenant WHO=alice" not in seen
    assert "sees " not in seen and "secret of alice" not in seen
    # Nor can it undo the sandbox or write outside its own folders.
    assert "unmounted" not in seen and "wrote the portal's code" not in seen
    assert not (Path(instances.__file__).parent / "escaped").exists()
    # Alice's own files are hers: her job wrote them, where she (and the portal) reads them.
    assert f"device {mine.held_slot.device_uuid}" in log_of(first)
    assert "tenant WHO=alice" in log_of(first) and "tenant WHO=bob" not in log_of(first)
    assert (mine_folder / "jobs").exists()
    with open(f"{checkpoints}checkpoints/secret") as secret:
        assert secret.read() == "secret of alice\n"
    # Bob's job ended: its slice is given back and its session ends with it.
    tasks.terminate_instance.apply(args=[str(theirs.pk)])
    theirs.refresh_from_db()
    assert theirs.status == Instance.Status.TERMINATED and theirs.held_slot is None
    assert host_agents().pid(theirs.pk) is None
    assert host_agents().pid(mine.pk) is not None  # alice's runs on


def test_a_slices_notebook_is_its_session_and_sees_only_its_own_slice(
    portal_asgi, alice, bob, catalog, place_order, settings
):
    from tests.instances.test_notebooks import as_user, run_cell, session_of

    settings.PORTAL_SIMULATED_AGENTS = True
    slices = []
    for user in (alice, bob):
        order = place_order(user, instance_type=catalog["p4d.24xlarge"], mig_profile="1g.5gb")
        record = order.instances.get()
        tasks.provision_instance.apply(args=[str(record.pk)])
        slices.append(Instance.objects.get(pk=record.pk))
    host = slices[0].held_slot.host
    services.instance_provision(instance_id=host.pk)
    mig_host_follow(host_id=host.pk)
    mine, theirs = (Instance.objects.with_detail().get(pk=s.pk) for s in slices)
    assert mine.held_slot.host_id == theirs.held_slot.host_id
    notebooks = []
    for record, user in ((mine, alice), (theirs, bob)):
        notebook = services.notebook_open(instance=record, actor=user)
        notebook = services.notebook_launch(notebook_id=notebook.pk)
        assert notebook.status == Notebook.Status.RUNNING, notebook.reason
        notebooks.append(notebook)
    try:
        base = f"/notebook/{mine.pk}/"
        with as_user(portal_asgi, alice) as api:
            kernel = api.post(f"{base}api/kernels", json={"name": "python3"})
            assert kernel.status_code == 201, (
                host_agents().folder(mine.pk) / "notebook.log"
            ).read_text()[-3000:]
        url = f"ws://{portal_asgi}{base}api/kernels/{kernel.json()['id']}/channels"
        headers = {"Cookie": f"sessionid={session_of(alice)}", "Origin": f"http://{portal_asgi}"}
        code = (
            "import os, glob\n"
            "print(os.environ['CUDA_VISIBLE_DEVICES'])\n"
            f"print(os.path.exists({str(host_agents().folder(theirs.pk))!r}))\n"
            "lines = [open(p, 'rb').read() for p in glob.glob('/proc/[0-9]*/cmdline')]\n"
            f"print(any({notebooks[1].token!r}.encode() in line for line in lines))\n"
            f"print(any({notebooks[0].token!r}.encode() in line for line in lines))\n"
        )
        printed = run_cell(url, headers, code).split()
        assert printed == [mine.held_slot.device_uuid, "False", "False", "True"], printed
        # Bob's notebook is his: alice is kept out of it.
        with as_user(portal_asgi, alice) as api:
            assert api.get(f"/notebook/{theirs.pk}/api/status").status_code == 404
    finally:
        for record in (mine, theirs):
            host_agents().end(record.pk, grace=1.0)
