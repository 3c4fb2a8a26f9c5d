"""The GPU telemetry agent a real host runs: cloud-init installs it with the host's own
credential (instances/services/telemetry.py agent_secret) and a systemd timer runs it every
minute. It reads nvidia-smi, keeps the readings in a spool until the portal accepts them, and
drops (with a line in the journal) only what the portal refused as malformed: nothing is lost
without a word on either side.

instances/lib/agent.py writes that cloud-config; the agent itself is a program of its own,
instances/agent/portal_agent.py, read from the package here.
"""

from __future__ import annotations

import json
from importlib.resources import files


def agent_program() -> str:
    """The agent program's text, as it is installed on a host (/usr/local/bin/portal-gpu-agent)."""
    return files("instances.agent").joinpath("portal_agent.py").read_text(encoding="utf-8")


SERVICE = """[Unit]
Description=GPU Portal telemetry agent
[Service]
Type=oneshot
EnvironmentFile=/etc/portal-agent.env
ExecStart=/usr/bin/python3 /usr/local/bin/portal-gpu-agent
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


def agent_cloud_config(
    *, portal_url: str, instance_id: str, token: str, extra_files: str = ""
) -> str:
    """The cloud-config keys that install and start the agent (appended to the host's
    user data), with ``extra_files`` (more write_files items, already YAML) in the same list.
    JSON strings are YAML strings, so every value is quoted safely."""
    env = (
        f"PORTAL_AGENT_URL={portal_url}\nPORTAL_INSTANCE_ID={instance_id}\n"
        f"PORTAL_AGENT_TOKEN={token}\n"
    )
    files = [
        ("/etc/portal-agent.env", "0600", env),
        ("/usr/local/bin/portal-gpu-agent", "0755", agent_program()),
        ("/etc/systemd/system/portal-gpu-agent.service", "0644", SERVICE),
        ("/etc/systemd/system/portal-gpu-agent.timer", "0644", TIMER),
    ]
    lines = ["write_files:"]
    for path, mode, content in files:
        lines += [
            f"  - path: {path}",
            f"    permissions: '{mode}'",
            f"    content: {json.dumps(content)}",
        ]
    if extra_files:
        lines.append(extra_files.rstrip("\n"))
    lines += [
        "runcmd:",
        "  - [systemctl, daemon-reload]",
        "  - [systemctl, enable, --now, portal-gpu-agent.timer]",
    ]
    return "\n".join(lines) + "\n"
