"""The agent a real host runs: cloud-init installs it with the host's own credential
(instances/services/telemetry.py agent_secret). A systemd timer runs its telemetry reading every
minute: it reads nvidia-smi, keeps the readings in a spool until the portal accepts them, and
drops (with a line in the journal) only what the portal refused as malformed: nothing is lost
without a word on either side. A long-running service runs its job mode (``jobs``), which runs
the managed training jobs the portal hands the host.

instances/lib/agent.py writes that cloud-config; the agent itself is a program of its own,
instances/agent/portal_agent.py, read from the package here.
"""

from __future__ import annotations

import ast
import base64
import gzip
import json
from importlib.resources import files


def agent_program(name: str = "portal_agent.py") -> str:
    """The agent program's text, as it is installed on a host (/usr/local/bin/portal-gpu-agent),
    or of a module beside it (``tfevents.py``, ``workdir.py``, which it imports)."""
    return files("instances.agent").joinpath(name).read_text(encoding="utf-8")


# EC2 takes at most 16 KB of user data (before its base64); the programs go gzipped.
USER_DATA_MAX_BYTES = 16 * 1024


class Packed(str):
    """A file's content gzipped and base64-encoded, as cloud-init's ``gz+b64`` encoding reads
    it."""


def packed(text: str) -> Packed:
    data = gzip.compress(text.encode(), compresslevel=9, mtime=0)
    return Packed(base64.b64encode(data).decode())


def stripped(program: str) -> str:
    """A program as hosts get it: without its comments and docstrings (the repository keeps
    them), so that the agent, its modules and the notebook agent fit in EC2's 16 KB."""
    tree = ast.parse(program)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return "#!/usr/bin/env python3\n" + ast.unparse(tree) + "\n"


SERVICE = """[Unit]
Description=GPU Portal telemetry agent
[Service]
Type=oneshot
EnvironmentFile=/etc/portal-agent.env
ExecStart=/usr/bin/python3 /usr/local/bin/portal-gpu-agent
"""

# KillMode=process: systemd's SIGTERM goes to the agent alone, which stops its job with the
# job's own stop signal and grace, sends the rest of the log and the exit, then exits. It also
# means an agent that crashes leaves its job running for the restarted agent to adopt (job.pid):
# with control-group or mixed, systemd would kill the job's processes when the unit went down
# between the crash and the restart, and a training run would die with its agent. Should the
# agent itself hang, only it is killed at TimeoutStopSec; the next agent adopts or reports the
# job. TimeoutStopSec is longer than a job's grace (the portal allows a few minutes at most)
# plus the final checkpoint sync and reports. Exit 0 means the portal no longer knows the host
# (or systemd stopped the agent): asking again every 5 s would only be refused again.
JOBS_SERVICE = """[Unit]
Description=GPU Portal job agent (managed training jobs)
Wants=network-online.target
After=network-online.target
[Service]
EnvironmentFile=/etc/portal-agent.env
Environment=PORTAL_AGENT_IMDS_URL=http://169.254.169.254
ExecStart=/usr/bin/python3 /usr/local/bin/portal-gpu-agent jobs
Restart=always
RestartSec=5
RestartPreventExitStatus=0
KillMode=process
TimeoutStopSec=900
[Install]
WantedBy=multi-user.target
"""

# The notebook agent (instances/agent/portal_notebook_agent.py), on EC2 hosts when the portal
# offers notebooks there: KillMode=process, so that a restarted agent finds the JupyterLab (and
# the kernels) it left running instead of the researcher losing them.
NOTEBOOK_SERVICE = """[Unit]
Description=GPU Portal notebook agent (JupyterLab through the portal)
Wants=network-online.target
After=network-online.target
[Service]
EnvironmentFile=/etc/portal-agent.env
Environment=PORTAL_AGENT_NOTEBOOK_USER={user}
ExecStart=/usr/bin/python3 /usr/local/bin/portal-notebook-agent
Restart=always
RestartSec=5
RestartPreventExitStatus=0
KillMode=process
[Install]
WantedBy=multi-user.target
"""

TIMER = """[Unit]
Description=GPU Portal telemetry agent, every minute
[Timer]
OnBootSec=60
OnUnitActiveSec=60
AccuracySec=5
[Install]
WantedBy=timers.target
"""


CLUSTER_NODES = "/etc/portal-agent.nodes"
# Run before the agents start: the host's launch index from IMDSv2, then its line of the nodes
# table appended to the agents' environment file.
PICK_NODE = (
    'T=$(curl -sf -X PUT -H "X-aws-ec2-metadata-token-ttl-seconds: 60" '
    "http://169.254.169.254/latest/api/token) && "
    'I=$(curl -sf -H "X-aws-ec2-metadata-token: $T" '
    "http://169.254.169.254/latest/meta-data/ami-launch-index) && "
    'awk -v i="$I" \'$1 == i {print "PORTAL_INSTANCE_ID=" $2; print "PORTAL_AGENT_TOKEN=" $3}\' '
    f"{CLUSTER_NODES} >> /etc/portal-agent.env"
)


def agent_cloud_config(
    *,
    portal_url: str,
    instance_id: str,
    token: str,
    extra_files: str = "",
    notebook_user: str = "",
    nodes: tuple[tuple[str, str], ...] = (),
) -> str:
    """The cloud-config keys that install and start the agent (appended to the host's
    user data), with ``extra_files`` (more write_files items, already YAML) in the same list,
    and the notebook agent serving JupyterLab as ``notebook_user`` when one is given.
    JSON strings are YAML strings, so every value is quoted safely."""
    env = (
        f"PORTAL_AGENT_URL={portal_url}\nPORTAL_INSTANCE_ID={instance_id}\n"
        f"PORTAL_AGENT_TOKEN={token}\n"
    )
    node_files = []
    if nodes:
        # A cluster's hosts share one user data (one RunInstances call): each finds its own
        # id and credential by its launch index, which is its rank.
        env = f"PORTAL_AGENT_URL={portal_url}\n"
        table = "".join(f"{rank} {node} {secret}\n" for rank, (node, secret) in enumerate(nodes))
        node_files = [(CLUSTER_NODES, "0600", table)]
    files = [
        ("/etc/portal-agent.env", "0600", env),
        ("/usr/local/bin/portal-gpu-agent", "0755", packed(stripped(agent_program()))),
        # Beside it: the script's folder is the first place its imports are looked for.
        ("/usr/local/bin/tfevents.py", "0644", packed(stripped(agent_program("tfevents.py")))),
        ("/usr/local/bin/workdir.py", "0644", packed(stripped(agent_program("workdir.py")))),
        ("/etc/systemd/system/portal-gpu-agent.service", "0644", SERVICE),
        ("/etc/systemd/system/portal-gpu-agent.timer", "0644", TIMER),
        ("/etc/systemd/system/portal-job-agent.service", "0644", JOBS_SERVICE),
    ]
    files += node_files
    if notebook_user:
        files += [
            (
                "/usr/local/bin/portal-notebook-agent",
                "0755",
                packed(stripped(agent_program("portal_notebook_agent.py"))),
            ),
            (
                "/etc/systemd/system/portal-notebook-agent.service",
                "0644",
                NOTEBOOK_SERVICE.format(user=notebook_user),
            ),
        ]
    lines = ["write_files:"]
    for path, mode, content in files:
        lines += [f"  - path: {path}", f"    permissions: '{mode}'"]
        if isinstance(content, Packed):
            lines.append("    encoding: gz+b64")
        lines.append(f"    content: {json.dumps(str(content))}")
    if extra_files:
        lines.append(extra_files.rstrip("\n"))
    lines += [
        "runcmd:",
        *([f"  - [sh, -c, {json.dumps(PICK_NODE)}]"] if nodes else []),
        "  - [systemctl, daemon-reload]",
        "  - [systemctl, enable, --now, portal-gpu-agent.timer]",
        "  - [systemctl, enable, --now, portal-job-agent.service]",
    ]
    if notebook_user:
        lines.append("  - [systemctl, enable, --now, portal-notebook-agent.service]")
    return "\n".join(lines) + "\n"
