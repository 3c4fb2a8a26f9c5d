#!/usr/bin/env python3
"""GPU Portal telemetry agent: one reading a minute, posted with this host's credential.

cloud-init installs this file as /usr/local/bin/portal-gpu-agent with the host's own credential
(instances/lib/agent.py; the credential is instances/services/telemetry.py's agent_secret) and a
systemd timer runs it every minute. It reads each GPU from nvidia-smi (the host's totals beside
each GPU's own), keeps the readings in a spool until the portal accepts them, and drops (with a
line in the journal) only the readings the portal refused as malformed, posting the rest again:
nothing is lost without a word on either side. It runs on the host's python3, which
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


def gpu_readings(out):
    """Each GPU's line of nvidia-smi's CSV as the portal's ``gpus`` item. A GPU that answers
    "[N/A]" or "[Unknown Error]" (one fallen off the bus, say) is left out with a line in the
    journal: the others still count, and the portal is told only what was read."""
    gpus = []
    for line in out.strip().splitlines():
        try:
            index, utilization, used, total = (int(value) for value in line.split(","))
        except ValueError:
            print("nvidia-smi gave an unreadable GPU line:", line.strip(), file=sys.stderr)
            continue
        gpus.append(
            {
                "index": index,
                "utilization": utilization,
                "memory_used_mib": used,
                "memory_total_mib": total,
            }
        )
    return gpus


def reading_of(gpus, at):
    """The minute's reading: the host's totals (the GPUs' mean utilization, their memory summed)
    with each GPU's own beside them."""
    return {
        "at": at.isoformat(),
        "utilization": round(sum(gpu["utilization"] for gpu in gpus) / len(gpus)),
        "memory_used_mib": sum(gpu["memory_used_mib"] for gpu in gpus),
        "gpus": gpus,
    }


def main() -> None:
    url = os.environ["PORTAL_AGENT_URL"].rstrip("/")
    host = os.environ["PORTAL_INSTANCE_ID"]
    token = os.environ["PORTAL_AGENT_TOKEN"]
    spool_path = os.environ.get("PORTAL_AGENT_SPOOL", SPOOL)
    out = subprocess.run(
        [
            "nvidia-smi",
            "--query-gpu=index,utilization.gpu,memory.used,memory.total",
            "--format=csv,noheader,nounits",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    gpus = gpu_readings(out)
    os.makedirs(os.path.dirname(spool_path), exist_ok=True)
    if gpus:
        reading = reading_of(gpus, datetime.datetime.now(datetime.timezone.utc))
        with open(spool_path, "a") as spool:
            spool.write(json.dumps(reading) + "\n")
    else:
        print("nvidia-smi listed no readable GPU; nothing read this minute", file=sys.stderr)
    if not os.path.exists(spool_path):
        return
    with open(spool_path) as spool:
        readings = [json.loads(line) for line in spool if line.strip()][-1440:]
    try:
        answer = post(url, host, token, readings)
        if answer is not None:
            # 400 names each refused reading ("readings.3.gpus.0.index"); the rest of the
            # batch was sound and is posted again without them.
            refused = refused_positions(answer)
            print("portal refused readings:", json.dumps(answer)[:2000], file=sys.stderr)
            kept = [reading for n, reading in enumerate(readings) if n not in refused]
            if refused and kept and post(url, host, token, kept) is not None:
                print("portal refused the rest too; dropped", file=sys.stderr)
    except urllib.error.HTTPError as error:
        sys.exit(f"portal answered {error.code}; {len(readings)} readings kept for later")
    except OSError as error:
        sys.exit(f"portal unreachable ({error}); {len(readings)} readings kept for later")
    os.remove(spool_path)


def post(url, host, token, readings):
    """POST the batch: None once stored, the portal's answer (a dict) when it refused the batch
    as malformed (400); any other refusal raises, and the spool is kept."""
    request = urllib.request.Request(
        f"{url}/api/v1/instances/{host}/metrics/",
        data=json.dumps({"readings": readings}).encode(),
        headers={"Authorization": f"Agent {token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        urllib.request.urlopen(request, timeout=20).close()
    except urllib.error.HTTPError as error:
        if error.code != 400:
            raise
        try:
            return json.loads(error.read().decode())
        except ValueError:
            return {}
    return None


def refused_positions(answer):
    """The positions in the batch a 400 names (its ``fields`` are "readings.N..." paths)."""
    positions = set()
    for name in answer.get("fields") or {}:
        parts = name.split(".")
        if len(parts) > 1 and parts[0] == "readings" and parts[1].isdigit():
            positions.add(int(parts[1]))
    return positions


if __name__ == "__main__":
    main()
