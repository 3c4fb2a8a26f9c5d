"""Hosts: ``gpu hosts``, ``host``, ``stop|start|terminate``, ``extend``, ``ssh``,
``ssh-config`` and ``notebook``, over /api/v1/instances/."""

from __future__ import annotations

import os
import re
import shutil
import time
import uuid
import webbrowser
from typing import Annotated

import typer

from gpucli.client import (
    EXIT_REFUSED,
    EXIT_USAGE,
    Portal,
    connect,
    fail,
)
from gpucli.output import (
    JsonOption,
    fields,
    hours,
    note,
    out,
    print_json,
    table,
    waiting,
    when,
)

# Hosts still worth showing by default: not ended (terminated, failed).
LIVE = (
    "requested",
    "provisioning",
    "running",
    "stopping",
    "stopped",
    "starting",
    "terminating",
    "interrupted",
)

HOST_NAME = re.compile(r"^portal-([0-9a-f]{8})$")


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def host_id(portal: Portal, ref: str) -> str:
    """A host's id from its id, its name (portal-1a2b3c4d) or the start of its id."""
    if _is_uuid(ref):
        return ref
    match = HOST_NAME.match(ref)
    start = match.group(1) if match else ref.lower()
    if len(start) < 4 or not re.fullmatch(r"[0-9a-f-]+", start):
        fail(
            f"{ref!r} is not a host: give its id, its name (portal-1a2b3c4d) or 4+ "
            "characters of its id.",
            EXIT_USAGE,
        )
    found = [row["id"] for row in portal.pages("/api/v1/instances/") if row["id"].startswith(start)]
    if len(found) == 1:
        return found[0]
    if not found:
        fail(f"No host you can see is called {ref}; `gpu hosts --all` lists them.", EXIT_REFUSED)
    fail(f"{ref} names {len(found)} hosts; give more of the id.", EXIT_USAGE)


def show_hosts(rows: list[dict]) -> None:
    table(
        ["HOST", "STATUS", "TYPE", "MARKET", "PROJECT", "OWNER", "ADDRESS", "LEASE ENDS", "COST $"],
        [
            (
                row["name"],
                row["status"],
                row["instance_type"],
                row["market"],
                row["project"],
                row["owner"],
                row["public_ip"],
                when(row["lease_expires_at"]),
                row["cost_so_far"],
            )
            for row in rows
        ],
        empty="No hosts.",
    )


def hosts_list(
    everything: Annotated[
        bool, typer.Option("--all", help="Everyone's hosts you can see, ended ones too.")
    ] = False,
    status: Annotated[
        list[str] | None, typer.Option(help="Only this status (repeat for several).")
    ] = None,
    project: Annotated[str | None, typer.Option(help="Only this project's hosts.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Your hosts that have not ended (--all: every host you can see)."""
    params: dict = {} if everything else {"mine": "true", "status": list(LIVE)}
    if status:
        params["status"] = status
    if project:
        params["project"] = project
    rows = connect().everything("/api/v1/instances/", params)
    if as_json:
        print_json(rows)
    else:
        show_hosts(rows)


def host(
    ref: Annotated[
        str, typer.Argument(metavar="HOST", help="Its id, name or the start of its id.")
    ],
    as_json: JsonOption = False,
) -> None:
    """One host: status, address, lease, cost so far and its latest events."""
    portal = connect()
    row = portal.get(f"/api/v1/instances/{host_id(portal, ref)}/")
    if as_json:
        print_json(row)
        return
    fields(
        [
            ("host", f"{row['name']} ({row['id']})"),
            (
                "status",
                f"{row['status']}" + (f": {row['status_reason']}" if row["status_reason"] else ""),
            ),
            ("type", f"{row['instance_type']} ({row['gpu_count']}x {row['gpu_model']})"),
            ("image", row["image"]),
            ("market", row["market"]),
            ("project", f"{row['project']} (owner {row['owner']})"),
            ("zone", row["availability_zone"] or row["region"]),
            ("ssh", row["ssh_command"]),
            ("lease ends", when(row["lease_expires_at"])),
            (
                "running",
                f"{row['running_seconds'] // 3600} h {row['running_seconds'] % 3600 // 60} min",
            ),
            ("cost so far", f"${row['cost_so_far']}"),
            (
                "GPU utilization",
                f"{row['gpu_utilization']} %" if row["gpu_utilization"] is not None else None,
            ),
            ("spot warning", when(row["spot_warning_at"]) if row["spot_warning_at"] else None),
        ]
    )
    for event in row["events"][-5:]:
        out.print(
            f"  {when(event['at'])}  {event['old_status'] or '-'} -> {event['new_status']}  "
            f"{event['reason']}",
            markup=False,
        )


def _act(action: str, refs: list[str]) -> None:
    portal = connect()
    ids = [host_id(portal, ref) for ref in refs]
    if len(ids) == 1:
        row = portal.post(f"/api/v1/instances/{ids[0]}/{action}/")
        note(f"{row['name']}: {row['status']}")
        return
    answer = portal.post("/api/v1/instances/bulk/", {"action": action, "instances": ids})
    for row in answer["requested"]:
        note(f"{row['name']}: {row['status']}")
    for refusal in answer["refused"]:
        note(f"{refusal['name']}: {refusal['detail']}")
    if answer["refused"]:
        raise typer.Exit(EXIT_REFUSED)


HostRefs = Annotated[list[str], typer.Argument(metavar="HOST...", help="Ids, names or id starts.")]


def stop(refs: HostRefs) -> None:
    """Stop hosts (on-demand only: the cloud does not stop spot hosts)."""
    _act("stop", refs)


def start(refs: HostRefs) -> None:
    """Start stopped hosts."""
    _act("start", refs)


def terminate(refs: HostRefs) -> None:
    """Terminate hosts: they end for good, with their disks."""
    _act("terminate", refs)


def extend(
    ref: Annotated[str, typer.Argument(metavar="HOST")],
    duration: Annotated[str, typer.Argument(metavar="HOURS", help="How much longer: 4h, 1d.")],
) -> None:
    """Lengthen a host's lease (up to the project's longest lease, within its budget)."""
    added = hours(duration)
    portal = connect()
    row = portal.post(f"/api/v1/instances/{host_id(portal, ref)}/extend/", {"hours": added})
    note(f"{row['name']}: lease extended by {added} h, now ends {when(row['lease_expires_at'])}.")


def _target(row: dict) -> tuple[str, str, str]:
    """The user, address and port ("" for ssh's own) of a running host, from the API's
    ssh_command (``ssh user@ip``, or a MIG slice's ``ssh -p PORT user@ip``)."""
    command = row.get("ssh_command")
    if not command and row["status"] == "running" and row.get("public_ip"):
        # Ordered without a key, a shared MIG host, a slice its cloud gives no login.
        fail(f"{row['name']} runs but has no SSH login; its page says why.", EXIT_REFUSED)
    if not command:
        fail(f"{row['name']} is {row['status']}: it has no address until it runs.", EXIT_REFUSED)
    words = command.split()
    user, _, address = words[-1].rpartition("@")
    port = words[words.index("-p") + 1] if "-p" in words else ""
    return user, address, port


def ssh(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(metavar="HOST")],
) -> None:
    """Open SSH to a running host as the user its image has (a MIG slice: its own login, into
    its sandbox); anything after HOST goes to ssh: its options, then a command to run."""
    portal = connect()
    row = portal.get(f"/api/v1/instances/{host_id(portal, ref)}/")
    user, address, port = _target(row)
    program = shutil.which("ssh")
    if program is None:
        fail("No ssh program on PATH: install OpenSSH's client.", EXIT_USAGE)
    # The destination first: OpenSSH reads options after it too, and the first word after
    # them is the command to run (``gpu ssh HOST -i KEY nvidia-smi``).
    at = ["-p", port] if port else []
    os.execv(program, ["ssh", *at, f"{user}@{address}", *ctx.args])  # noqa: S606 - ssh is the point


def ssh_config(
    everything: Annotated[
        bool, typer.Option("--all", help="Every running host you can see, not only yours.")
    ] = False,
) -> None:
    """Print a Host block per running host, for ~/.ssh/config (or a file it Includes)."""
    params: dict = {"status": "running"}
    if not everything:
        params["mine"] = "true"
    rows = connect().everything("/api/v1/instances/", params)
    if not rows:
        note("No running hosts.")
    for row in rows:
        if not row.get("ssh_command"):
            continue
        user, address, port = _target(row)
        typer.echo(
            f"# {row['instance_type']} in {row['project']}, lease ends "
            f"{when(row['lease_expires_at'])}\n"
            f"Host {row['name']}\n    HostName {address}\n    User {user}\n"
            + (f"    Port {port}\n" if port else "")
        )


NOTEBOOK_POLL_SECONDS = 1.0


def notebook(
    ref: Annotated[str, typer.Argument(metavar="HOST")],
    stop: Annotated[bool, typer.Option("--stop", help="Stop the host's JupyterLab.")] = False,
    no_open: Annotated[
        bool, typer.Option("--no-open", help="Print its address; do not open a browser.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Open JupyterLab on a running host, through the portal (signed in as in your browser):
    starts it if needed, waits until it answers, prints its address and opens it."""
    portal = connect()
    path = f"/api/v1/instances/{host_id(portal, ref)}/notebook/"
    if stop:
        portal.json("DELETE", path)
        note(f"Stopped the JupyterLab of {ref}.")
        return
    answer = portal.post(path)
    with waiting(f"Starting JupyterLab on {ref}…") as spinner:
        while answer["status"] == "starting":
            time.sleep(NOTEBOOK_POLL_SECONDS)
            answer = portal.get(path)
            spinner.update(f"JupyterLab on {ref}: {answer['status']}")
    if answer["status"] != "running":
        fail(
            f"JupyterLab did not start on {ref}: {answer['reason'] or 'no reason given'}",
            EXIT_REFUSED,
        )
    if as_json:
        print_json(answer)
    else:
        typer.echo(answer["url"])
    if not no_open and not as_json:
        webbrowser.open(answer["url"])


def register(app: typer.Typer) -> None:
    examples = {
        "hosts": (hosts_list, "gpu hosts --json | jq -r '.[].name'"),
        "host": (host, "gpu host portal-1a2b3c4d"),
        "stop": (stop, "gpu stop portal-1a2b3c4d portal-5e6f7a8b"),
        "start": (start, "gpu start portal-1a2b3c4d"),
        "terminate": (terminate, "gpu terminate portal-1a2b3c4d"),
        "extend": (extend, "gpu extend portal-1a2b3c4d 4h"),
        "ssh": (ssh, "gpu ssh portal-1a2b3c4d -L 6006:localhost:6006"),
        "ssh-config": (
            ssh_config,
            "gpu ssh-config > ~/.ssh/gpu-portal.conf (and Include it in ~/.ssh/config)",
        ),
        "notebook": (notebook, "gpu notebook portal-1a2b3c4d"),
    }
    for name, (function, example) in examples.items():
        extra = {}
        if name == "ssh":
            extra["context_settings"] = {"allow_extra_args": True, "ignore_unknown_options": True}
        app.command(name, epilog=f"Example: {example}", **extra)(function)
