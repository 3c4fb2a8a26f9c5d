"""The catalog and ordering: ``gpu types``, ``images`` and ``order [--wait]``, over
/api/v1/instance-types/, /api/v1/images/ and /api/v1/orders/."""

from __future__ import annotations

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

# Hosts still worth showing by default: not ended (terminated, failed).
from gpucli.hosts import show_hosts
from gpucli.output import (
    JsonOption,
    choices,
    hours,
    note,
    print_json,
    table,
    waiting,
)

Market = choices("Market", ("on_demand", "spot"))
Policy = choices("Policy", ("notify", "relaunch_spot", "fallback_on_demand"))
POLL_SECONDS = 1.0
ENDED = ("terminated", "failed", "interrupted")
KEY_FILES = ("id_ed25519.pub", "id_ecdsa.pub", "id_rsa.pub")


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
    cluster: Annotated[
        int | None,
        typer.Option(
            help="Launch this many hosts together as one cluster (all or none, in one placement "
            "group, each with its rank and TF_CONFIG) instead of --count separate hosts."
        ),
    ] = None,
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
    if cluster is not None:
        del body["count"]
        body |= {"placement": "cluster", "nodes": cluster}
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
    what = "a cluster of " if placed.get("placement") == "cluster" else ""
    note(
        f"Ordered {what}{placed['count']}x {placed['instance_type']} ({placed['market']}) in "
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


def register(app: typer.Typer) -> None:
    examples = {
        "types": (types, "gpu types --gpu H100 --gpu A100 --min-memory 80 --spot"),
        "images": (images, "gpu images --type g5.xlarge"),
        "order": (
            order,
            "gpu order g5.xlarge --image tf-2.17-cuda12.3 --market spot --count 2 --lease 8h "
            "--wait",
        ),
    }
    for name, (function, example) in examples.items():
        app.command(name, epilog=f"Example: {example}")(function)
