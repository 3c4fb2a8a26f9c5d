"""The host agents of the simulated cloud: a simulated host has no machine of its own, so each
one that may run a managed training job gets a folder under ``root`` and a job agent process
(instances/agent/portal_agent.py ``jobs``, the program a real host runs) on this machine, which
asks the portal for its runs and runs them here, exactly as it would on EC2.

Several portal processes (web, workers) may ask for the same host's agent, so what an agent is
lives in files, not in this object: ``root/<instance>/agent.pid`` holds "pid starttime", the
start time from /proc telling the agent from a process given its pid later; its runs' job.pid
files (under ``root/<instance>/jobs/``) hold the same for each job process.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

AGENT = Path(__file__).resolve().parents[1] / "agent" / "portal_agent.py"
# What an agent (and so a job) inherits of this process: never the portal's own secrets.
INHERITED = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ")


def started_at(pid: int) -> str | None:
    """The process's start time (/proc/<pid>/stat field 22), None once it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def live_pid(pid_file: Path) -> int | None:
    """The pid a "pid starttime ..." file names, while that very process still runs."""
    try:
        pid, start = pid_file.read_text().split()[:2]
        return int(pid) if started_at(int(pid)) == start else None
    except (OSError, ValueError):
        return None


class HostAgents:
    """The job agents of the simulated hosts, one folder and one process per host."""

    def __init__(self, root: Path):
        self.root = Path(root)
        # Agents this process started, polled so that an ended one is reaped, not a zombie.
        self.children: dict[str, subprocess.Popen] = {}

    def folder(self, instance_id) -> Path:
        return self.root / str(instance_id)

    def ensure(
        self,
        instance_id,
        *,
        url: str,
        token: str,
        env: dict | None = None,
        shown: tuple[tuple[Path, Path], ...] = (),
    ) -> int:
        """The pid of the host's live agent, started now (detached, in a session of its own)
        if it has none. ``shown``: a tenant's agent on a shared host (a MIG slice's) runs in a
        sandbox of its own (``sandbox``) that shows, of the hosts' folders, only its own, and
        of each (folder, kept) pair's folder only what it keeps."""
        folder = self.folder(instance_id)
        (folder / "jobs").mkdir(parents=True, exist_ok=True)
        # Two portal processes ensuring the same host at once must not start two agents.
        with open(folder / "agent.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            live = self.pid(instance_id)
            if live is not None:
                return live
            fence = None if not shown else ((self.root.parent, folder), *shown)
            return self._start(instance_id, url, token, env, fence)

    def sandbox(
        self,
        instance_id,
        command: list[str],
        shown: tuple[tuple[Path, Path], ...],
        *,
        network: bool = True,
    ) -> list[str]:
        """``command`` as a tenant of a shared host runs it (a MIG slice's agent, notebook or
        login): as a user of its own (``sandbox_uid``, no group, not root: root's files, the
        disks' devices, /proc/sys and other tenants' terminals are not its to write or read),
        in PID, IPC and mount namespaces of its own (unshare, util-linux), without any
        capability and with no way to gain one (setpriv), so it can neither undo nor add a
        mount; every file system read-only but its own folders, a /tmp, /dev/shm and /root of
        its own; each (folder, kept) pair of ``shown`` leaves in the folder only what it keeps
        (the portal's var/ folder, with every host's folder, the database and broker files;
        every order's checkpoints), and the portal's .env reads empty. Its folders are its
        own: the kept ones and, in a host's folder (root's, with the portal's pid files and
        logs), ``jobs`` and ``home``. ``network=False``: a network namespace of its own too,
        with nothing in it. Run by root (offers_slice_sessions); the mounts live and die with
        the namespace. What it does not fence with the network on (an agent must reach the
        portal, and the portal a notebook): the services on this machine's loopback; and the
        GPUs (CUDA_VISIBLE_DEVICES names the slice's device; no device cgroup)."""
        self.marker(instance_id).mkdir(parents=True, exist_ok=True)
        stash = self.stash(instance_id)
        quote = shlex.quote
        uid = sandbox_uid(instance_id)
        kept = [own for _, own in shown]
        folders = sorted({folder for folder, _ in shown}, key=lambda f: len(f.parts))
        # What runs the tenant (the portal's code and its Python) stays in sight, read-only,
        # when it lives in a folder the sandbox covers (a checkout in /tmp, as CI's clone is;
        # a Python under /root, as pyenv's).
        programs = _covered({Path(__file__).resolve().parents[2], *_interpreter()})
        owned = [self.folder(instance_id) / "jobs", self.folder(instance_id) / "home"]
        for folder in owned:
            folder.mkdir(parents=True, exist_ok=True)
        lines = [
            "set -e",
            # The tenant's own folders (not what is in them: it made that itself, but for the
            # notebook's settings, which the portal writes), never following a link in them.
            *(f"chown -h {uid}:{uid} {quote(str(own))}" for own in [*kept, *owned]),
            f"chown -R -h {uid}:{uid} {quote(str(owned[1] / '.jupyter'))} 2>/dev/null || true",
        ]
        for number, own in enumerate(kept):
            own.mkdir(parents=True, exist_ok=True)
            (stash / str(number)).mkdir(parents=True, exist_ok=True)
            lines.append(f"mount -n --bind {quote(str(own))} {quote(str(stash / str(number)))}")
        for number, program in enumerate(programs):
            (stash / f"p{number}").mkdir(parents=True, exist_ok=True)
            lines.append(
                f"mount -n --bind {quote(str(program))} {quote(str(stash / f'p{number}'))}"
            )
        # Its user has a name (what sftp-server, ssh and the prompt look up): this machine's
        # users and groups, and "slice" (read-only, as every file system).
        home = owned[1]
        for table, entry in (
            ("passwd", f"slice:x:{uid}:{uid}:MIG slice:{home}:/bin/bash\n"),
            ("group", f"slice:x:{uid}:\n"),
        ):
            text = Path(f"/etc/{table}").read_text() + entry
            if not (stash / table).exists() or (stash / table).read_text() != text:
                (stash / table).write_text(text)  # once, not on every reconcile pass
                (stash / table).chmod(0o644)
            lines.append(f"mount -n --bind {quote(str(stash / table))} /etc/{table}")
        lines += [
            # Everything read-only (each mount: a bind remount changes that mount alone), then
            # the tenant's own folders writable again, and a /tmp and /dev/shm of its own.
            "findmnt -rno TARGET | grep -Ev '^/(proc|sys|dev)(/|$)' | while read -r target; do "
            'mount -n -o remount,bind,ro "$target" 2>/dev/null || true; done',
            *(
                f"mount -n -o remount,bind,rw {quote(str(stash / str(number)))}"
                for number in range(len(kept))
            ),
            *(f"mount -n -t tmpfs -o mode={mode} sandbox {cover}" for cover, mode in COVERED),
        ]
        for number, program in enumerate(programs):
            lines += [
                f"mkdir -p {quote(str(program))}",
                f"mount -n --move {quote(str(stash / f'p{number}'))} {quote(str(program))}",
            ]
        for folder in folders:
            lines += [
                f"mkdir -p {quote(str(folder))} 2>/dev/null || true",
                f"mount -n -t tmpfs -o mode=0755 sandbox {quote(str(folder))}",
            ]
        for number, own in enumerate(kept):
            lines += [
                f"mkdir -p {quote(str(own))}",
                f"mount -n --move {quote(str(stash / str(number)))} {quote(str(own))}",
            ]
        secrets_file = Path(__file__).resolve().parents[2] / ".env"
        if secrets_file.exists():
            lines.append(f"mount -n --bind /dev/null {quote(str(secrets_file))}")
        lines.append(
            f"exec setpriv --reuid={uid} --regid={uid} --clear-groups --inh-caps=-all "
            '--ambient-caps=-all --bounding-set=-all --no-new-privs -- "$@"'
        )
        return [
            "unshare",
            "--mount",
            "--propagation=private",
            "--ipc",
            *([] if network else ["--net"]),
            "--pid",
            "--fork",
            "--mount-proc",
            # unshare passes no signal on: end() sends SIGTERM to the sandbox's first process
            # itself; this kills it (and so the whole namespace) if unshare dies first.
            "--kill-child=SIGKILL",
            "sh",
            "-c",
            "\n".join(lines),
            "sandbox",
            *command,
        ]

    @staticmethod
    def stash(instance_id) -> Path:
        """Where a tenant's sandboxes are put together: mount points, its passwd and group
        (removed with the slice: SliceLogins.slice_session_end)."""
        return STASH / str(instance_id)

    def marker(self, instance_id) -> Path:
        """Where the portal notes that an agent runs sandboxed (outside the tenant's sight and
        reach: its own folder is the tenant's to write)."""
        return self.root.parent / ".sandboxes" / str(instance_id)

    def _start(
        self, instance_id, url: str, token: str, env: dict | None, shown: tuple | None = None
    ) -> int:
        folder = self.folder(instance_id)
        variables = {name: os.environ[name] for name in INHERITED if name in os.environ}
        variables |= {
            "PORTAL_AGENT_POLL_SECONDS": "1",
            "PORTAL_AGENT_GIVE_UP_SECONDS": "120",
            **(env or {}),
            "PORTAL_AGENT_URL": url,
            "PORTAL_INSTANCE_ID": str(instance_id),
            "PORTAL_AGENT_TOKEN": token,
            "PORTAL_AGENT_WORKDIR": str(folder / "jobs"),
        }
        command = [sys.executable, str(AGENT), "jobs"]
        if shown:
            command = self.sandbox(instance_id, command, shown)
        with open(folder / "agent.log", "ab") as log:
            child = subprocess.Popen(  # noqa: S603 (this interpreter, the portal's own agent)
                command,
                env=variables,
                cwd=folder,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.children[str(instance_id)] = child
        pid_file = folder / "agent.pid"
        pid_file.with_suffix(".tmp").write_text(f"{child.pid} {started_at(child.pid)}\n")
        pid_file.with_suffix(".tmp").replace(pid_file)
        return child.pid

    def notebook_start(
        self, instance_id, *, base_url: str, token: str, device: str = "", kept: tuple = ()
    ) -> int:
        """Start JupyterLab for the host, in its folder, on a free loopback port (what a host's
        agent does on EC2): the port, once the server runs. Only the portal's proxy is told the
        port and the token. ``device``: a MIG slice's, in its sandbox (``sandbox``), seeing
        that device only."""
        home = self.folder(instance_id) / "home"
        home.mkdir(parents=True, exist_ok=True)
        self.notebook_end(instance_id)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        variables = {name: os.environ[name] for name in INHERITED if name in os.environ}
        variables["JUPYTER_CONFIG_DIR"] = str(home / ".jupyter")
        # JupyterLab would ask each new user whether to fetch Jupyter's news from the internet.
        news = home / ".jupyter/lab/user-settings/@jupyterlab/apputils-extension"
        news.mkdir(parents=True, exist_ok=True)
        (news / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}\n')
        if device:
            variables |= {"CUDA_VISIBLE_DEVICES": device, "PORTAL_MIG_DEVICE": device}
        command = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={port}",
            "--port-retries=0",
            f"--ServerApp.base_url={base_url}",
            f"--ServerApp.root_dir={home}",
            f"--IdentityProvider.token={token}",
            # Nothing on this machine may fetch from the internet at run time.
            "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.extension_manager=readonly",
            # A sandbox host's user is this machine's (root in CI's containers).
            "--allow-root",
        ]
        if device:
            shown = ((self.root.parent, self.folder(instance_id)), *kept)
            command = self.sandbox(instance_id, command, shown)
        with open(self.folder(instance_id) / "notebook.log", "ab") as log:
            child = subprocess.Popen(  # noqa: S603 (this interpreter's JupyterLab)
                command,
                env=variables | {"HOME": str(home)},
                cwd=home,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.children[f"{instance_id}/notebook"] = child
        (self.folder(instance_id) / "notebook.pid").write_text(
            f"{child.pid} {started_at(child.pid)}\n"
        )
        return port

    def notebook_end(self, instance_id) -> None:
        """Stop the host's JupyterLab (its whole process group: the kernels too)."""
        pid = live_pid(self.folder(instance_id) / "notebook.pid")
        if pid is not None:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
        child = self.children.pop(f"{instance_id}/notebook", None)
        if child is not None:
            child.wait()

    def end(self, instance_id, *, grace: float = 5.0) -> None:
        """Stop the host's agent, which stops its job with the job's stop signal; after
        ``grace`` seconds SIGKILL what is left of the agent's and every job's process group.
        Ending a host with no live agent or job does nothing. A sandboxed agent is the first
        process of its namespace under unshare, which passes no signal on: it is told itself,
        and its namespace dies with it (its jobs' pid files, the tenant's to write, are not
        read)."""
        agent, jobs = self.pid(instance_id), self.job_pids(instance_id)
        if agent is not None:
            for pid in first_of(agent) if self.marker(instance_id).exists() else [agent]:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and (self.pid(instance_id) or self.job_pids(instance_id)):
            time.sleep(0.05)
        # A job's group outlives its first process when that one exits before its children:
        # the groups seen at the start are killed too (each is a new session: group id = pid).
        agent = self.pid(instance_id)
        for group in {*jobs, *self.job_pids(instance_id), *([agent] if agent else [])}:
            with contextlib.suppress(OSError):
                os.killpg(group, signal.SIGKILL)
        child = self.children.pop(str(instance_id), None)
        if child is not None:
            child.wait()
        self.notebook_end(instance_id)

    def pid(self, instance_id) -> int | None:
        """The host's live agent, or None."""
        child = self.children.get(str(instance_id))
        if child is not None:
            child.poll()  # reap an agent that ended, so its pid reads as gone
        return live_pid(self.folder(instance_id) / "agent.pid")

    def job_pids(self, instance_id) -> list[int]:
        """The host's live job processes, from their runs' job.pid files (none read for a
        sandboxed agent: they hold the namespace's pids, written where the tenant writes)."""
        if self.marker(instance_id).exists():
            return []
        pid_files = sorted((self.folder(instance_id) / "jobs").glob("*/job.pid"))
        return [pid for pid in map(live_pid, pid_files) if pid is not None]


def first_of(pid: int) -> list[int]:
    """The children of ``pid`` (unshare's: the sandbox's first process)."""
    try:
        return [
            int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        ]
    except (OSError, ValueError):
        return []


# The machine's folders a sandbox replaces with empty ones of its own (and their modes): its
# /tmp, /dev/shm, and root's home (root's keys, credentials and history).
TMP = Path("/tmp")  # noqa: S108 (not a file made here: the folder a sandbox covers)
SHM = Path("/dev/shm")  # noqa: S108 (as TMP)
COVERED = ((TMP, "1777"), (SHM, "1777"), (Path("/root"), "0755"))
STASH = Path("/run/portal-sandboxes")
# A sandbox's user: one per tenant, out of the range of this machine's own users.
SANDBOX_UIDS = (1_000_000, 1_000_000_000)


def sandbox_uid(instance_id) -> int:
    """The user a tenant's sandbox runs as: the same for each of its processes (agent, notebook,
    login), and another for every other tenant but by a one-in-a-billion chance."""
    low, high = SANDBOX_UIDS
    digest = hashlib.sha256(str(instance_id).encode()).digest()
    return low + int.from_bytes(digest[:8], "big") % (high - low)


def _interpreter() -> set[Path]:
    """Where this Python and its packages live (a venv's, and the Python it was made from)."""
    return {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}


def _covered(paths: set[Path]) -> list[Path]:
    """The paths in a folder a sandbox covers, outermost only (one inside another comes with
    it)."""
    inside = [path for path in paths if any(path.is_relative_to(c) for c, _ in COVERED)]
    return sorted(
        path for path in inside if not any(path != o and path.is_relative_to(o) for o in inside)
    )


def sandboxes_possible() -> bool:
    """Whether this machine can sandbox a tenant: root (the mounts) and util-linux's
    unshare, setpriv and findmnt."""
    return os.geteuid() == 0 and all(map(shutil.which, ("unshare", "setpriv", "findmnt")))


_AGENTS: dict[Path, HostAgents] = {}


def host_agents() -> HostAgents:
    """This process's HostAgents for the simulated cloud's hosts (under var/simulated-hosts/):
    one per process, so the agents it started are reaped when they end."""
    from django.conf import settings

    root = Path(settings.VAR_DIR) / "simulated-hosts"
    return _AGENTS.setdefault(root, HostAgents(root))


class HostNotebooks:
    """The simulated cloud's notebooks (mixed into SimulatedProvider): JupyterLab in the host's
    folder on this machine, as a host's agent starts it on EC2. Offered while hosts may run
    programs here at all (PORTAL_SIMULATED_AGENTS)."""

    agents: bool

    def _running(self, cloud_id: str) -> None:
        """Refuse what only a running host can start (on a stopped or ended one)."""
        from instances.providers.base import ProviderPermanentError

        if self._get(cloud_id).state != "running":
            raise ProviderPermanentError("The host is not running.", code="IncorrectInstanceState")

    @classmethod
    def offers_notebooks(cls) -> bool:
        from django.conf import settings

        return settings.PORTAL_SIMULATED_AGENTS  # what each instance's ``agents`` is set from

    def notebook_start(
        self,
        cloud_id: str,
        *,
        instance_id: str,
        base_url: str,
        token: str,
        device: str = "",
        kept: tuple = (),
    ) -> str:
        self._running(cloud_id)
        port = host_agents().notebook_start(
            instance_id, base_url=base_url, token=token, device=device, kept=kept
        )
        return f"127.0.0.1:{port}"

    def notebook_end(self, cloud_id: str, *, instance_id: str) -> None:
        host_agents().notebook_end(instance_id)

    @classmethod
    def offers_slice_sessions(cls) -> bool:
        # The same processes on this machine, each in a sandbox this machine can make.
        return cls.offers_notebooks() and sandboxes_possible()

    def slice_session_start(
        self, cloud_id: str, *, slice_id: str, token: str, device: str, kept: tuple = ()
    ) -> None:
        """The slice's agent on this machine, in its own sandbox (HostAgents.sandbox), with
        CUDA_VISIBLE_DEVICES naming its MIG device only."""
        from django.conf import settings

        self._running(cloud_id)
        host_agents().ensure(
            slice_id,
            url=settings.PORTAL_AGENT_URL,
            token=token,
            env={"CUDA_VISIBLE_DEVICES": device, "PORTAL_MIG_DEVICE": device},
            shown=tuple(kept),
        )
