#!/usr/bin/env python3
"""GPU Portal telemetry agent: one reading a minute, posted with this host's credential.

cloud-init installs this file as /usr/local/bin/portal-gpu-agent with the host's own credential
(instances/lib/agent.py; the credential is instances/services/telemetry.py's agent_secret) and a
systemd timer runs it every minute. It reads nvidia-smi, keeps the readings in a spool until the
portal accepts them, and drops (with a line in the journal) only what the portal refused as
malformed: nothing is lost without a word on either side. It runs on the host's python3, which
may be older than the portal's, with the standard library only.
"""

import datetime
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

SPOOL = "/var/lib/portal-agent/spool.jsonl"


def main() -> None:
    url = os.environ["PORTAL_AGENT_URL"].rstrip("/")
    host = os.environ["PORTAL_INSTANCE_ID"]
    token = os.environ["PORTAL_AGENT_TOKEN"]
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
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


if __name__ == "__main__":
    main()
