"""The catalog and hosts: ``gpu types``, ``images``, ``order``, ``hosts``, ``host``,
``stop|start|terminate``, ``extend``, ``ssh`` and ``ssh-config``, over /api/v1/instance-types/,
/api/v1/images/, /api/v1/orders/ and /api/v1/instances/."""

from __future__ import annotations

import os
import re
import shutil
import time
import uuid
from pathlib import Path
from typing import Annotated

import typer

from gpucli.client import (
    EXIT_FAILED,
    EXIT_REFUSED,
    EXIT_USAGE,
    Portal,
    connect,
    default_project,
    fail,
)
from gpucli.output import (
    JsonOption,
    choices,
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
ENDED = ("terminated", "failed", "interrupted")
Market = choices("Market", ("on_demand", "spot"))
Policy = choices("Policy", ("notify", "relaunch_spot", "fallback_on_demand"))
POLL_SECONDS = 1.0
HOST_NAME = re.compile(r"^portal-([0-9a-f]{8})$")
KEY_FILES = ("id_ed25519.pub", "id_ecdsa.pub", "id_rsa.pub")


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


def public_key(path: Path | None) -> str:
    """The SSH public key to put on the hosts: the file given, else the usual ones."""
    candidates = [path] if path else [Path.home() / ".ssh" / name for name in KEY_FILES]
    for candidate in candidates:
        if candidate.is_file():
            text = candidate.read_text(encoding="utf-8").strip()
            if text.startswith("-----BEGIN") or "PRIVATE KEY" in text:
                fail(f"{candidate} is a private key: give the .pub file beside it.", EXIT_USAGE)
            return text
    if path:
        fail(f"No SSH public key at {path}.", EXIT_USAGE)
    fail("No SSH public key in ~/.ssh (id_ed25519.pub, ...): give one with --ssh-key.", EXIT_USAGE)


def types(
    gpu: Annotated[
        list[str] | None, typer.Option("--gpu", help="GPU model, e.g. H100 (repeat for several).")
    ] = None,
    count: Annotated[int | None, typer.Option(help="Exactly this many GPUs per host.")] = None,
    min_count: Annotated[int | None, typer.Option(help="At least this many GPUs per host.")] = None,
    min_memory: Annotated[int | None, typer.Option(help="At least this many GiB per GPU.")] = None,
    max_price: Annotated[
        str | None, typer.Option(help="At most this on-demand $/hour, e.g. 2.50.")
    ] = None,
    spot: Annotated[
        bool | None,
        typer.Option(
            "--spot/--no-spot", help="Only types that offer spot (or only those that do not)."
        ),
    ] = None,
    sort: Annotated[
        str,
        typer.Option(
            help="price, price_per_gpu_hour, gpu_memory, gpu_count or name; -name reverses."
        ),
    ] = "price_per_gpu_hour",
    as_json: JsonOption = False,
) -> None:
    """The catalog of GPU host types, with on-demand and spot prices per hour."""
    params: dict = {"ordering": sort}
    for name, value in (
        ("gpu_model", gpu),
        ("gpu_count", count),
        ("min_gpu_count", min_count),
        ("min_gpu_memory_gib", min_memory),
        ("max_price", max_price),
    ):
        if value not in (None, []):
            params[name] = value
    if spot is not None:
        params["spot_offered"] = "true" if spot else "false"
    rows = connect().everything("/api/v1/instance-types/", params)
    if as_json:
        print_json(rows)
        return
    table(
        ["TYPE", "GPUS", "VCPUS", "MEMORY", "ON-DEMAND $/H", "SPOT $/H", "$/GPU-H"],
        [
            (
                row["name"],
                f"{row['gpu_count']}x {row['gpu_model']} {row['gpu_memory_gib']} GiB",
                row["vcpus"],
                f"{row['memory_gib']} GiB",
                row["on_demand_price_per_hour"],
                row["spot_price_per_hour"] if row["spot_offered"] else "no spot",
                row["price_per_gpu_hour"],
            )
            for row in rows
        ],
        empty="No type in the catalog matches.",
    )


def images(
    instance_type: Annotated[
        str | None, typer.Option("--type", help="Only images that run on this type's GPU.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """TensorFlow images to order hosts with."""
    params = {"instance_type": instance_type} if instance_type else {}
    rows = connect().everything("/api/v1/images/", params)
    if as_json:
        print_json(rows)
        return
    table(
        ["IMAGE", "TENSORFLOW", "CUDA", "PYTHON", "GPU ARCHITECTURES"],
        [
            (
                row["name"],
                row["tensorflow_version"],
                row["cuda_version"],
                row["python_version"],
                ", ".join(row["gpu_architectures"]),
            )
            for row in rows
        ],
        empty="No image matches.",
    )


def order(
    instance_type: Annotated[
        str, typer.Argument(metavar="TYPE", help="An instance type (gpu types).")
    ],
    image: Annotated[str, typer.Option(help="A TensorFlow image (gpu images --type TYPE).")],
    market: Annotated[Market, typer.Option(help="The market.")] = "on_demand",
    count: Annotated[int, typer.Option(help="How many hosts.")] = 1,
    lease: Annotated[str, typer.Option(help="How long the hosts live: 8h, 2d.")] = "8h",
    project: Annotated[
        str | None, typer.Option(help="The project (default: your only one).")
    ] = None,
    ssh_key: Annotated[
        Path | None, typer.Option(help="SSH public key file (default ~/.ssh/id_ed25519.pub).")
    ] = None,
    max_spot_price: Annotated[
        str | None, typer.Option(help="Spot: the most to pay per host-hour.")
    ] = None,
    on_interruption: Annotated[
        Policy | None, typer.Option(help="Spot: what an interruption does.")
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait until every host runs (exit 3 if one fails).")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Order hosts of a type from the catalog.

    They are provisioned at once, or after approval if the project's policy holds the order."""
    lease_hours = hours(lease)
    portal = connect()
    body = {
        "project": default_project(portal, project),
        "instance_type": instance_type,
        "image": image,
        "market": str(market),
        "count": count,
        "lease_hours": lease_hours,
        "ssh_public_key": public_key(ssh_key),
    }
    if max_spot_price:
        body["max_spot_price"] = max_spot_price
    if on_interruption:
        body["interruption_policy"] = str(on_interruption)
    # One key per invocation: if the answer is lost and the same call is sent again, the
    # portal answers with the first order instead of placing a second.
    placed = portal.post(
        "/api/v1/orders/", body, headers={"Idempotency-Key": f"gpu-cli-{uuid.uuid4()}"}
    )
    names = ", ".join(host["name"] for host in placed["instances"]) or "none yet"
    note(
        f"Ordered {placed['count']}x {placed['instance_type']} ({placed['market']}) in "
        f"{placed['project']}: order {placed['id']}, {placed['status']}; hosts {names}; "
        f"about ${placed['estimate']['per_hour']}/hour."
    )
    if placed["status"] == "pending_approval":
        note(f"It waits for approval: {placed['approval_reason']}")
    final = wait_for_order(portal, placed) if wait else placed
    if as_json:
        print_json(final)
    elif wait:
        show_hosts(final["instances"])


def wait_for_order(portal: Portal, placed: dict) -> dict:
    """Poll the order until every host runs; refusals exit 1, a failed host exits 3."""
    with waiting(f"Waiting for order {placed['id'][:8]}…") as spinner:
        while True:
            current = portal.get(f"/api/v1/orders/{placed['id']}/")
            status = current["status"]
            if status in ("rejected", "expired", "cancelled"):
                reason = current.get("decision_reason") or "no reason given"
                fail(f"Order {current['id']} was {status}: {reason}", EXIT_REFUSED)
            hosts = current["instances"]
            broken = [host for host in hosts if host["status"] in ENDED]
            if broken:
                host = broken[0]
                fail(
                    f"{host['name']} {host['status']}: "
                    f"{host['status_reason'] or 'no reason given'}",
                    EXIT_FAILED,
                )
            if hosts and all(host["status"] == "running" for host in hosts):
                return current
            states = ", ".join(f"{host['name']} {host['status']}" for host in hosts)
            spinner.update(f"Order {current['id'][:8]}: {status.replace('_', ' ')}; {states}")
            time.sleep(POLL_SECONDS)


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


def _target(row: dict) -> tuple[str, str]:
    """The user and address of a running host, from the API's ssh_command (ssh user@ip)."""
    command = row.get("ssh_command")
    if not command:
        fail(f"{row['name']} is {row['status']}: it has no address until it runs.", EXIT_REFUSED)
    user, _, address = command.split()[-1].rpartition("@")
    return user, address


def ssh(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(metavar="HOST")],
) -> None:
    """Open SSH to a running host as the user its image has; anything after HOST goes to ssh."""
    portal = connect()
    row = portal.get(f"/api/v1/instances/{host_id(portal, ref)}/")
    user, address = _target(row)
    program = shutil.which("ssh")
    if program is None:
        fail("No ssh program on PATH: install OpenSSH's client.", EXIT_USAGE)
    os.execv(program, ["ssh", *ctx.args, f"{user}@{address}"])  # noqa: S606 - ssh is the point


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
        user, address = _target(row)
        typer.echo(
            f"# {row['instance_type']} in {row['project']}, lease ends "
            f"{when(row['lease_expires_at'])}\n"
            f"Host {row['name']}\n    HostName {address}\n    User {user}\n"
        )


def register(app: typer.Typer) -> None:
    example = {
        "types": "gpu types --gpu H100 --gpu A100 --min-memory 80 --spot",
        "images": "gpu images --type g5.xlarge",
        "order": "gpu order g5.xlarge --image tf-2.17-cuda12.3 --market spot --count 2 "
        "--lease 8h --wait",
        "hosts": "gpu hosts --json | jq -r '.[].name'",
        "host": "gpu host portal-1a2b3c4d",
        "stop": "gpu stop portal-1a2b3c4d portal-5e6f7a8b",
        "start": "gpu start portal-1a2b3c4d",
        "terminate": "gpu terminate portal-1a2b3c4d",
        "extend": "gpu extend portal-1a2b3c4d 4h",
        "ssh": "gpu ssh portal-1a2b3c4d -L 6006:localhost:6006",
        "ssh-config": "gpu ssh-config > ~/.ssh/gpu-portal.conf (and Include it in ~/.ssh/config)",
    }
    commands = {
        "types": types,
        "images": images,
        "order": order,
        "hosts": hosts_list,
        "host": host,
        "stop": stop,
        "start": start,
        "terminate": terminate,
        "extend": extend,
        "ssh": ssh,
        "ssh-config": ssh_config,
    }
    for name, function in commands.items():
        extra = {}
        if name == "ssh":
            extra["context_settings"] = {"allow_extra_args": True, "ignore_unknown_options": True}
        app.command(name, epilog=f"Example: {example[name]}", **extra)(function)
