"""A MIG slice's own SSH login, really used: on the simulated cloud each slice's login is an
OpenSSH server on a loopback port, which forces its owner's key into the slice's sandbox. Two
tenants log in with their own keys and each lands in their own slice: its MIG device, its home,
its processes, and nothing of the other's; one researcher's two slices with one key are two
logins. Forwarding is refused (it would run outside the sandbox); a given-back slice's login
ends with its open session, and every login ends with its host."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from instances import services, tasks
from instances.models import Instance
from instances.providers.simulated import SimulatedProvider
from instances.providers.simulated_agents import host_agents
from instances.providers.simulated_logins import host_logins, logins_possible
from instances.services.mig import _session_start, mig_host_follow
from portal.services import token_issue
from tests.cli.conftest import Gpu

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def keypair(folder: Path, name: str) -> tuple[Path, str]:
    """A fresh ed25519 key pair: the private key's path and the public key's line."""
    private = folder / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(private)], check=True)
    return private, private.with_suffix(".pub").read_text().strip()


def ssh(login: str, key: Path, *args: str, timeout: float = 20) -> subprocess.CompletedProcess:
    """The slice's ssh command as its page shows it, with the researcher's key."""
    options = [
        "-i", str(key), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
        "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
        "-o", "LogLevel=ERROR",
    ]  # fmt: skip
    words = login.split()
    return subprocess.run(
        [words[0], *options, *words[1:], *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def two_slices(alice, bob, catalog, place_order, settings, tmp_path):
    """Alice's and bob's 1g.5gb slices on one running shared host, each ordered with a key of
    its owner's own."""
    assert logins_possible(), "slice logins need Debian's openssh-server (/usr/sbin/sshd)"
    settings.PORTAL_SIMULATED_AGENTS = True
    settings.VAR_DIR = tmp_path / "var"
    records, keys = [], []
    for user in (alice, bob):
        private, public = keypair(tmp_path, user.username)
        order = place_order(
            user, instance_type=catalog["p4d.24xlarge"], mig_profile="1g.5gb", ssh_public_key=public
        )
        record = order.instances.get()
        tasks.provision_instance.apply(args=[str(record.pk)])
        records.append(record)
        keys.append(private)
    host = Instance.objects.get(pk=records[0].pk).held_slot.host
    services.instance_provision(instance_id=host.pk)
    mig_host_follow(host_id=host.pk)
    yield [Instance.objects.with_detail().get(pk=r.pk) for r in records], keys, tmp_path
    for record in records:
        host_agents().end(record.pk, grace=1.0)


LOOK = (
    'echo "device $CUDA_VISIBLE_DEVICES"; echo "home $(pwd)"; echo "mine" > notes.txt; '
    'for p in /proc/[0-9]*/cmdline; do tr "\\0" " " < "$p"; echo; done | grep -c . ; '
    "test -e {other} && echo 'sees the other slice'; "
    "test -e {logins} && echo 'sees the logins'; "
    "touch /etc/escaped 2>/dev/null && echo 'wrote /etc'; "
    # What root without capabilities could still do: a sysctl (core_pattern runs a program as
    # root), a disk's device, root's secrets, this machine's services (PostgreSQL trusts it).
    "test -w /proc/sys/kernel/core_pattern && echo 'writes sysctls'; "
    "for disk in /dev/[sv]d? /dev/nvme?n?; do test -w $disk && echo 'writes a disk'; done; "
    "cat /etc/shadow >/dev/null 2>&1 && echo 'reads /etc/shadow'; "
    "ls -A /root | grep -vx .pyenv | grep -q . && echo 'sees root home'; "
    "(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo 'reaches a service'; "
    "id -u"
)


def test_each_tenant_logs_in_to_their_own_slice_and_nothing_else(
    two_slices, api_as, alice, settings
):
    (mine, theirs), (alice_key, bob_key), tmp_path = two_slices
    assert mine.status == theirs.status == Instance.Status.RUNNING
    assert mine.held_slot.host_id == theirs.held_slot.host_id
    # Each slice has its own login (a server of its own on the host), in the API and on its
    # page; the shared host itself has none.
    shown = api_as(alice).get(f"/api/v1/instances/{mine.pk}/").json()["ssh_command"]
    assert shown == mine.ssh_command != theirs.ssh_command
    assert shown.startswith("ssh -p ") and shown.endswith(" root@127.0.0.1")
    assert mine.held_slot.host.ssh_command is None

    other = host_agents().folder(theirs.pk)
    port = settings.DATABASES["default"]["PORT"] or 5432
    look = LOOK.format(other=other, logins=host_logins().root, port=port)
    seen = ssh(mine.ssh_command, alice_key, look)
    assert seen.returncode == 0, seen.stderr
    lines = seen.stdout.splitlines()
    assert f"device {mine.held_slot.device_uuid}" in lines
    assert theirs.held_slot.device_uuid not in seen.stdout
    assert f"home {host_agents().folder(mine.pk) / 'home'}" in lines
    assert "sees the other slice" not in lines and "sees the logins" not in lines
    assert "wrote /etc" not in lines and not Path("/etc/escaped").exists()
    assert {"writes sysctls", "writes a disk", "reads /etc/shadow"}.isdisjoint(lines)
    assert {"sees root home", "reaches a service"}.isdisjoint(lines)
    assert lines[-1] != "0"  # a user of the slice's own, not root
    # Its own processes only: the shell and what it ran (a handful), not the machine's.
    processes = int(lines[-2])
    assert processes < 10, seen.stdout
    # What it wrote is in its own home, where its notebook's files are too.
    assert (host_agents().folder(mine.pk) / "home/notes.txt").read_text() == "mine\n"

    # Files go in with scp (its SFTP server runs in the sandbox too), into the slice's home.
    data = tmp_path / "data.csv"
    data.write_text("a,b\n1,2\n")
    words = mine.ssh_command.split()
    options = ["-i", str(alice_key), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no"]
    options += ["-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"]
    copied = subprocess.run(
        ["scp", "-P", words[2], *options, str(data), f"{words[3]}:data.csv"],
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert copied.returncode == 0, copied.stderr
    assert (host_agents().folder(mine.pk) / "home/data.csv").read_text() == "a,b\n1,2\n"
    # Bob's key opens bob's slice, with bob's device.
    seen = ssh(theirs.ssh_command, bob_key, 'echo "$CUDA_VISIBLE_DEVICES"')
    assert seen.stdout.split() == [theirs.held_slot.device_uuid], seen.stderr
    # A key that belongs to no slice is refused; so is a forwarding, which would run outside
    # the sandbox.
    stranger, _ = keypair(tmp_path, "stranger")
    refused = ssh(mine.ssh_command, stranger, "true")
    assert refused.returncode == 255 and "Permission denied" in refused.stderr
    forward = ssh(mine.ssh_command, alice_key, "-W", "127.0.0.1:5432")
    assert forward.returncode != 0


def test_gpu_ssh_logs_in_to_a_slice_at_its_port(two_slices, alice, live_server):
    (mine, _), (alice_key, _), tmp_path = two_slices
    gpu = Gpu(tmp_path).connect(live_server.url, token_issue(user=alice, name="cli", days=1)[1])
    port = mine.ssh_command.split()[2]
    config = gpu("ssh-config")
    assert f"Host {mine.name}\n    HostName 127.0.0.1\n    User root\n    Port {port}\n" in (
        config.stdout
    )
    options = ["-i", str(alice_key), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no"]
    options += ["-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"]
    seen = gpu("ssh", mine.name, *options, 'echo "$CUDA_VISIBLE_DEVICES"')
    assert seen.returncode == 0, seen.stderr
    assert seen.stdout.split() == [mine.held_slot.device_uuid]


def test_a_given_back_slice_loses_its_login_and_its_open_session(two_slices, api_as, alice, bob):
    (mine, theirs), (alice_key, bob_key), _ = two_slices
    login, stale = theirs.ssh_command, theirs
    words = login.split()
    options = ["-i", str(bob_key), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no"]
    options += ["-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"]
    # Bob is logged in, running something, when his slice is given back.
    session = subprocess.Popen(
        [words[0], *options, *words[1:], "echo in; sleep 60"],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert session.stdout.readline().strip() == "in"
        assert api_as(bob).post(f"/api/v1/instances/{theirs.pk}/terminate/").status_code == 202
        tasks.terminate_instance.apply(args=[str(theirs.pk)])
        theirs = Instance.objects.get(pk=theirs.pk)
        assert theirs.status == Instance.Status.TERMINATED and theirs.ssh_command is None
        session.wait(timeout=15)  # ended, not left to sleep its minute out
    finally:
        session.kill()
    assert host_logins().server_pid(theirs.pk) is None
    assert not host_agents().stash(theirs.pk).exists()  # nor what its sandboxes were made of
    # A follow or reconcile pass that read the slice before it was given back (and so still
    # finds it running) does not let its key in again.
    _session_start(stale, mine.held_slot.host)
    assert host_logins().server_pid(theirs.pk) is None
    refused = ssh(login, bob_key, "true")
    assert refused.returncode == 255, refused.stdout  # nothing listens there any more
    # Alice's login is untouched.
    assert ssh(mine.ssh_command, alice_key, "echo ok").stdout == "ok\n"

    # A host that ends (here from the cloud's console, behind the portal's back) takes every
    # login on it with it.
    login = mine.ssh_command
    assert host_logins().server_pid(mine.pk) is not None
    SimulatedProvider().kill(mine.held_slot.host.cloud_id)
    assert host_logins().server_pid(mine.pk) is None
    assert ssh(login, alice_key, "true").returncode == 255


def test_two_slices_ordered_with_one_key_are_two_logins(
    alice, catalog, place_order, settings, tmp_path
):
    """A researcher's order of two slices with their one key: each login lands in its own
    slice (a key cannot tell the slices apart; each slice's server can)."""
    assert logins_possible()
    settings.PORTAL_SIMULATED_AGENTS = True
    settings.VAR_DIR = tmp_path / "var"
    private, public = keypair(tmp_path, "alice")
    order = place_order(
        alice,
        instance_type=catalog["p4d.24xlarge"],
        mig_profile="1g.5gb",
        count=2,
        ssh_public_key=public,
    )
    for record in order.instances.all():
        tasks.provision_instance.apply(args=[str(record.pk)])
    host = Instance.objects.get(order__mig_host=True)
    services.instance_provision(instance_id=host.pk)
    mig_host_follow(host_id=host.pk)
    records = list(Instance.objects.with_detail().filter(order=order))
    assert len({r.held_slot.host_id for r in records}) == 1
    for record in records:
        seen = ssh(record.ssh_command, private, 'echo "$CUDA_VISIBLE_DEVICES $HOME"')
        assert seen.stdout.split() == [
            record.held_slot.device_uuid,
            str(host_agents().folder(record.pk) / "home"),
        ], seen.stderr
