"""The GPU telemetry agent a real host runs: cloud-init installs it with the host's own
credential (instances/services/telemetry.py agent_secret) and a systemd timer runs it every
minute. It reads nvidia-smi, keeps the readings in a spool until the portal accepts them, and
drops (with a line in the journal) only what the portal refused as malformed: nothing is lost
without a word on either side.
"""

from __future__ import annotations

import json

AGENT_SCRIPT = r"""#!/usr/bin/env python3
# GPU Portal telemetry agent: one reading a minute, posted with this host's credential.
import datetime, json, os, subprocess, sys, urllib.error, urllib.request

SPOOL = "/var/lib/portal-agent/spool.jsonl"
url = os.environ["PORTAL_AGENT_URL"].rstrip("/")
host = os.environ["PORTAL_INSTANCE_ID"]
token = os.environ["PORTAL_AGENT_TOKEN"]
out = subprocess.run(
    ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"],
    capture_output=True, text=True, check=True,
).stdout
gpus = [[int(v) for v in line.split(",")] for line in out.strip().splitlines()]
reading = {
    "at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
    "utilization": round(sum(g[0] for g in gpus) / len(gpus)),
    "memory_used_mib": sum(g[1] for g in gpus),
}
os.makedirs(os.path.dirname(SPOOL), exist_ok=True)
with open(SPOOL, "a") as spool:
    spool.write(json.dumps(reading) + "\n")
with open(SPOOL) as spool:
    readings = [json.loads(line) for line in spool if line.strip()][-1440:]
request = urllib.request.Request(
    f"{url}/api/v1/instances/{host}/metrics/",
    data=json.dumps({"readings": readings}).encode(),
    headers={"Authorization": f"Agent {token}", "Content-Type": "application/json"},
    method="POST",
)
try:
    urllib.request.urlopen(request, timeout=20)
except urllib.error.HTTPError as error:
    if error.code != 400:
        sys.exit(f"portal answered {error.code}; {len(readings)} readings kept for later")
    print("portal refused readings:", error.read().decode()[:2000], file=sys.stderr)
except OSError as error:
    sys.exit(f"portal unreachable ({error}); {len(readings)} readings kept for later")
os.remove(SPOOL)
"""

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
        ("/usr/local/bin/portal-gpu-agent", "0755", AGENT_SCRIPT),
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
