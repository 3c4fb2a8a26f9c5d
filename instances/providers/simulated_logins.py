"""The SSH logins of MIG slices on the simulated cloud's shared hosts: each slice with a login
gets an OpenSSH server of its own (/usr/sbin/sshd) on a loopback port of this machine, as a real
shared host would give each tenant a login of their own. Its authorized_keys holds the slice
owner's key, restricted (no forwarding of ports, agents or X11, which would run outside the
sandbox) and forced to one command, the slice's login script, which opens a shell (or runs the
command asked) in the slice's own sandbox (HostAgents.sandbox): only its MIG device
(CUDA_VISIBLE_DEVICES), its files and its processes. One server per slice, not per host: a
researcher's two slices on one host, ordered with the same key, are two logins (a key cannot
tell them apart; the port does).

What a login is lives in files under ``root`` (outside every sandbox's sight: var/ is hidden
there), since any portal process may set or end one:

- ``root/hosts/<cloud id>/host_key``: the host's SSH identity, which all its slices' servers
  present;
- ``root/slices/<slice id>/``: the slice's host, login script, authorized_keys, its server's
  sshd_config, sshd.pid ("pid starttime", as the agents' pid files), port and log, and its
  live sessions' pid files (``sessions/``), each session a sandbox that dies with its first
  process;
- ``root/locks/``: one lock per slice and per host.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from instances.models import SimulatedHost
from instances.providers.simulated_agents import (
    HostAgents,
    first_of,
    host_agents,
    live_pid,
    started_at,
)

SSHD = Path("/usr/sbin/sshd")
KEYGEN = Path("/usr/bin/ssh-keygen")
# A simulated host is this machine: its logins are root's (sshd refuses root anything but the
# forced command, PermitRootLogin forced-commands-only), inside the slice's sandbox, which
# holds no capability.
USER = "root"
SSHD_CONFIG = """\
ListenAddress 127.0.0.1:{port}
HostKey {host_key}
AuthorizedKeysFile {folder}/authorized_keys
PidFile {folder}/sshd.daemon.pid
PermitRootLogin forced-commands-only
AllowUsers root
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
AllowTcpForwarding no
AllowStreamLocalForwarding no
AllowAgentForwarding no
X11Forwarding no
PermitTunnel no
PermitUserEnvironment no
PrintMotd no
# scp and sftp: the subsystem runs as the forced command asks, in the slice's sandbox.
Subsystem sftp /usr/lib/openssh/sftp-server
"""
# The sandboxed shell of a login: in the slice's home, the command the client asked for, or a
# login shell.
SHELL = (
    'cd "$HOME" || exit 1; '
    'if [ -n "$SSH_ORIGINAL_COMMAND" ]; then exec /bin/bash -c "$SSH_ORIGINAL_COMMAND"; fi; '
    "exec /bin/bash -l"
)


def logins_possible() -> bool:
    """Whether this machine can serve slice logins: an OpenSSH server (Debian's
    openssh-server) and the ssh-keygen that makes its host key (openssh-client)."""
    return SSHD.exists() and KEYGEN.exists()


class HostLogins:
    """The slice logins of the simulated cloud's shared hosts."""

    def __init__(self, root: Path, agents: HostAgents):
        self.root = Path(root)
        self.agents = agents

    def host_folder(self, cloud_id: str) -> Path:
        return self.root / "hosts" / cloud_id

    def slice_folder(self, slice_id) -> Path:
        return self.root / "slices" / str(slice_id)

    def set(self, cloud_id: str, *, slice_id, key: str, device: str, kept: tuple = ()) -> str:
        """Let ``key`` (an OpenSSH public key line) into slice ``slice_id``'s sandbox on shared
        host ``cloud_id``: the ssh command that logs in. Safe to ask again: the same login is
        kept, and its server started again if it has died. A slice whose login was ended is
        refused (OSError) for good: a follow or reconcile pass that read the slice before it
        was given back cannot let its key in again."""
        folder = self.slice_folder(slice_id)
        home = self.agents.folder(slice_id) / "home"
        shown = ((self.agents.root.parent, self.agents.folder(slice_id)), *kept)
        with self._lock(f"slice-{slice_id}"):
            if self._ended(slice_id).exists():
                raise OSError(f"slice {slice_id}'s login has ended")
            (folder / "sessions").mkdir(parents=True, exist_ok=True)
            # No network but its own loopback: a login needs none (its agent and notebook
            # reach the portal; a shell must not reach this machine's services).
            sandboxed = self.agents.sandbox(
                slice_id, ["/bin/bash", "-c", SHELL], shown, network=False
            )
            quote = shlex.quote
            sessions = quote(str(folder / "sessions"))
            script = "\n".join(
                [
                    "#!/bin/sh",
                    f"# slice {slice_id}'s login: sshd's forced command",
                    # A session the portal could not record (its login ending) does not start.
                    f"echo \"$$ $(cut -d' ' -f22 /proc/$$/stat)\" > {sessions}/$$ || exit 1",
                    f"export HOME={quote(str(home))} CUDA_VISIBLE_DEVICES={quote(device)} "
                    f"PORTAL_MIG_DEVICE={quote(device)}",
                    f"exec {shlex.join(sandboxed)}",
                    "",
                ]
            )
            _write(folder / "login.sh", script, mode=0o700)
            _write(folder / "host", cloud_id)
            # The key alone (its type and data, as validated when ordered): the comment is the
            # researcher's, and this line is the server's.
            line = " ".join(key.split()[:2])
            _write(
                folder / "authorized_keys",
                f"restrict,pty,command={json.dumps(str(folder / 'login.sh'))} {line} "
                f"slice-{slice_id}\n",
            )
            port = self._serve(folder, self._host_key(cloud_id))
        return f"ssh -p {port} {USER}@127.0.0.1"

    def end(self, slice_id) -> None:
        """End the slice's login for good: its server and every connection to it, so its key
        opens nothing any more, and its open sessions. A slice without a login changes
        nothing (but is refused one from now on)."""
        folder = self.slice_folder(slice_id)
        with self._lock(f"slice-{slice_id}"):
            self._ended(slice_id).parent.mkdir(parents=True, exist_ok=True)
            self._ended(slice_id).touch()
            if not folder.exists():
                return
            self._server_end(folder)
            self._sessions_end(folder)
            shutil.rmtree(folder, ignore_errors=True)

    def host_end(self, cloud_id: str) -> None:
        """The host is gone (stopped or terminated): every login on it, and its identity."""
        if not self.host_folder(cloud_id).exists():
            return  # it never had a login
        for host_file in (self.root / "slices").glob("*/host"):
            with contextlib.suppress(OSError):
                if host_file.read_text() == cloud_id:
                    self.end(host_file.parent.name)
        shutil.rmtree(self.host_folder(cloud_id), ignore_errors=True)

    def server_pid(self, slice_id) -> int | None:
        return live_pid(self.slice_folder(slice_id) / "sshd.pid")

    def _ended(self, slice_id) -> Path:
        """The mark of a slice whose login has ended: never set again."""
        return self.root / "ended" / str(slice_id)

    @contextlib.contextmanager
    def _lock(self, name: str):
        (self.root / "locks").mkdir(parents=True, exist_ok=True)
        with open(self.root / "locks" / name, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _host_key(self, cloud_id: str) -> Path:
        """The host's SSH identity, made with its first login."""
        host_key = self.host_folder(cloud_id) / "host_key"
        with self._lock(f"host-{cloud_id}"):
            if not host_key.exists():
                host_key.parent.mkdir(parents=True, exist_ok=True)
                subprocess.run(  # noqa: S603 (ssh-keygen, with arguments of the portal's own)
                    [str(KEYGEN), "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)],
                    check=True,
                    capture_output=True,
                )
        return host_key

    def _serve(self, folder: Path, host_key: Path) -> int:
        """The port of the slice's live server, started now if it has none (sshd binds its port
        before it goes into the background, so the login works once this returns)."""
        if live_pid(folder / "sshd.pid") is not None:
            return int((folder / "port").read_text())
        # The server's privilege separation folder (Debian's package makes it at boot).
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        config = folder / "sshd_config"
        for _ in range(3):  # a port found free may be taken before sshd binds it
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            config.write_text(SSHD_CONFIG.format(port=port, folder=folder, host_key=host_key))
            daemon = folder / "sshd.daemon.pid"
            daemon.unlink(missing_ok=True)
            started = subprocess.run(  # noqa: S603 (the machine's sshd, with the config above)
                [str(SSHD), "-f", str(config), "-E", str(folder / "sshd.log")],
                capture_output=True,
                text=True,
            )
            if started.returncode != 0:
                continue  # it could not bind the port (or start at all): nothing runs
            # It runs (it exits at once when it cannot bind): its pid file follows its fork.
            pid = _pid_in(daemon)
            if pid is None:
                raise OSError("sshd started but wrote no pid file: " + _tail(folder / "sshd.log"))
            _write(folder / "sshd.pid", f"{pid} {started_at(pid)}\n")
            _write(folder / "port", str(port))
            return port
        raise OSError(f"sshd did not start: {_tail(folder / 'sshd.log') or started.returncode}")

    @staticmethod
    def _server_end(folder: Path) -> None:
        """Stop the slice's server and every connection it serves (OpenSSH leaves those
        running when the listener goes: each is a child of it)."""
        pid = live_pid(folder / "sshd.pid")
        if pid is not None:
            for process in (pid, *first_of(pid)):
                with contextlib.suppress(OSError):
                    os.kill(process, signal.SIGKILL)
        (folder / "sshd.pid").unlink(missing_ok=True)

    @staticmethod
    def _sessions_end(folder: Path) -> None:
        """Kill the slice's open sessions: each session's first process is unshare (the login
        script execs it); its child is the sandbox's first process, whose death takes every
        process of the sandbox with it (the end of a PID namespace)."""
        for pid_file in (folder / "sessions").glob("*"):
            pid = live_pid(pid_file)
            if pid is not None:
                for process in (*first_of(pid), pid):
                    with contextlib.suppress(OSError):
                        os.kill(process, signal.SIGKILL)


def _pid_in(path: Path, seconds: float = 5.0) -> int | None:
    """The pid a daemon writes to ``path`` once it has forked (read whole: the file may be
    seen empty between its creation and its write)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            return int(path.read_text())
        time.sleep(0.01)
    return None


def _tail(log: Path) -> str:
    """The last lines sshd wrote (why it did not start)."""
    try:
        return " / ".join(log.read_text().strip().splitlines()[-3:])
    except OSError:
        return ""


def _write(path: Path, text: str, mode: int = 0o600) -> None:
    """Write a file whole (a reader never sees half of one); one that already says ``text``
    is left alone (each reconcile pass asks every login again)."""
    with contextlib.suppress(OSError):
        if path.read_text() == text:
            return
    descriptor, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(descriptor, "w") as file:
        file.write(text)
    os.chmod(partial, mode)
    os.replace(partial, path)


class SliceLogins:
    """The simulated cloud's slice logins (mixed into SimulatedProvider, before HostNotebooks,
    whose slice sessions they end with), and what a host that stops or ends takes with it."""

    _running: Callable[[str], None]

    @staticmethod
    def _agent_stops(host: SimulatedHost) -> None:
        """A host that stops or ends takes what it runs on this machine with it, as a real
        host's power does: its agent and the job it runs, and its slices' logins (only hosts
        that ran a job, or had slice logins, have any)."""
        if host.state not in (SimulatedHost.State.PENDING, SimulatedHost.State.RUNNING):
            host_agents().end(host.portal_instance)
            host_logins().host_end(host.cloud_id)

    def slice_session_end(self, *, slice_id: str) -> None:
        agents = host_agents()
        agents.end(slice_id)
        host_logins().end(slice_id)
        # Nothing of the slice runs any more: what its sandboxes were made of goes too.
        shutil.rmtree(agents.stash(slice_id), ignore_errors=True)

    @classmethod
    def offers_slice_logins(cls) -> bool:
        return cls.offers_slice_sessions() and logins_possible()

    def slice_login_set(
        self, cloud_id: str, *, slice_id: str, key: str, device: str, kept: tuple = ()
    ) -> str:
        """The slice's login on this machine: its host's sshd on a loopback port, forcing the
        slice's key into the slice's sandbox."""
        from instances.providers.base import ProviderTransientError

        self._running(cloud_id)
        try:
            return host_logins().set(
                cloud_id, slice_id=slice_id, key=key, device=device, kept=tuple(kept)
            )
        except (OSError, subprocess.SubprocessError) as error:
            raise ProviderTransientError(f"The host's SSH server did not start: {error}") from None


_LOGINS: dict[Path, HostLogins] = {}


def host_logins() -> HostLogins:
    """The simulated cloud's slice logins (under var/simulated-logins/), beside its agents."""
    from django.conf import settings

    root = Path(settings.VAR_DIR) / "simulated-logins"
    return _LOGINS.setdefault(root, HostLogins(root, host_agents()))
