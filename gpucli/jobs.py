"""Managed jobs: ``gpu jobs launch|list|show|logs|cancel|rerun`` over /api/v1/jobs/. A job's
output is read from a byte offset (``logs/?offset=``) and written to stdout as it comes, so
``gpu jobs logs -f`` can be piped; a waited-on job that ends failed or cancelled exits 3."""

from __future__ import annotations

import re
import shlex
import sys
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
from gpucli.orders import public_key
from gpucli.output import JsonOption, choices, fields, note, out, print_json, table, waiting, when

jobs_app = typer.Typer(
    help="Managed jobs: a command the portal runs on a host of its own, recovered on a "
    "replacement if the cloud takes a spot host back.",
    no_args_is_help=True,
)

ENDED = ("succeeded", "failed", "cancelled")
Market = choices("Market", ("on_demand", "spot", "spot_then_on_demand"))
POLL_SECONDS = 1.0
MINUTES = re.compile(r"^\s*(\d+)\s*([mhd]?)\s*$", re.IGNORECASE)


def minutes(text: str) -> int:
    """'90m', '2h', '1d' or '90' (minutes) as whole minutes."""
    match = MINUTES.match(text)
    if not match or int(match.group(1)) < 1:
        raise typer.BadParameter(f"{text!r} is not a duration, such as 90m, 2h or 1d.")
    number, unit = int(match.group(1)), match.group(2).lower()
    return number * {"": 1, "m": 1, "h": 60, "d": 24 * 60}[unit]


def job_id(portal: Portal, ref: str) -> str:
    """A job's id from its id or the start of it (4 characters or more)."""
    try:
        return str(uuid.UUID(ref))
    except ValueError:
        pass
    start = ref.lower()
    if len(start) < 4 or not re.fullmatch(r"[0-9a-f-]+", start):
        fail(f"{ref!r} is not a job: give its id or 4+ characters of it.", EXIT_USAGE)
    found = [row["id"] for row in portal.pages("/api/v1/jobs/") if row["id"].startswith(start)]
    if len(found) == 1:
        return found[0]
    if not found:
        fail(
            f"No job you can see has an id starting {ref}; `gpu jobs list` lists them.",
            EXIT_REFUSED,
        )
    fail(f"{ref} starts {len(found)} jobs' ids; give more of it.", EXIT_USAGE)


def _environment(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals or not name:
            raise typer.BadParameter(f"{pair!r} is not NAME=value.", param_hint="--env")
        env[name] = value
    return env


@jobs_app.command(
    epilog="Example: gpu jobs launch --type g5.xlarge --image tf-2.17-cuda12.3 --market spot "
    "--env EPOCHS=8 --follow -- python train.py --epochs 8"
)
def launch(
    command: Annotated[
        list[str], typer.Argument(help="What to run (by sh -c on the host); put it after --.")
    ],
    instance_type: Annotated[str, typer.Option("--type", help="An instance type (gpu types).")],
    image: Annotated[str, typer.Option(help="A TensorFlow image (gpu images).")],
    market: Annotated[Market, typer.Option(help="The market.")] = "on_demand",
    name: Annotated[
        str | None, typer.Option(help="A name (default: the command's program).")
    ] = None,
    project: Annotated[
        str | None, typer.Option(help="The project (default: your only one).")
    ] = None,
    env: Annotated[
        list[str] | None, typer.Option("--env", "-e", help="NAME=value for the command (repeat).")
    ] = None,
    time_limit: Annotated[str, typer.Option(help="Longest it may run: 90m, 8h, 1d.")] = "24h",
    max_restarts: Annotated[int, typer.Option(help="Runs again after its own failures.")] = 0,
    nodes: Annotated[
        int,
        typer.Option(
            help="Run on this many hosts at once, as one cluster: each node's command gets "
            "TF_CONFIG (MultiWorkerMirroredStrategy)."
        ),
    ] = 1,
    ssh_key: Annotated[
        Path | None, typer.Option(help="An SSH public key to reach its host.")
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Print its output until it ends.")
    ] = False,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait until it ends (exit 3 unless it succeeded).")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Submit a job: a command the portal runs on a host it orders for it.

    The host is admitted as any order (quota, budget, approval); the output is kept."""
    if follow and as_json:
        raise typer.BadParameter("--follow prints the output on stdout: use --wait with --json.")
    text = command[0] if len(command) == 1 else shlex.join(command)
    portal = connect()
    body = {
        "project": default_project(portal, project),
        "name": name or Path(shlex.split(text)[0] if text.strip() else "job").name[:100],
        "instance_type": instance_type,
        "image": image,
        "market": str(market),
        "command": text,
        "env": _environment(env or []),
        "time_limit_minutes": minutes(time_limit),
        "max_restarts": max_restarts,
        "nodes": nodes,
    }
    if ssh_key:
        body["ssh_public_key"] = public_key(ssh_key)
    job = portal.post("/api/v1/jobs/", body)
    on = f"{job['nodes']} × " if job["nodes"] > 1 else ""
    note(
        f"Launched job {job['id']} ({job['name']}) on {on}{job['instance_type']}, "
        f"{job['market']}: {job['status']}."
    )
    if follow:
        job = stream_logs(portal, job["id"], follow=True)
    elif wait:
        job = wait_for_job(portal, job["id"])
    if as_json:
        print_json(job)
    if follow or wait:
        _exit_as(job)


def wait_for_job(portal: Portal, ident: str) -> dict:
    with waiting(f"Waiting for job {ident[:8]}…") as spinner:
        while True:
            job = portal.get(f"/api/v1/jobs/{ident}/")
            if job["status"] in ENDED:
                return job
            spinner.update(f"Job {ident[:8]}: {job['status']}")
            time.sleep(POLL_SECONDS)


def _exit_as(job: dict) -> None:
    """A job waited on: succeeded is 0; failed or cancelled is 3, with its reason."""
    if job["status"] == "succeeded":
        note(f"Job {job['id'][:8]} succeeded.")
        return
    exit_code = f" (exit code {job['exit_code']})" if job.get("exit_code") is not None else ""
    fail(
        f"Job {job['id'][:8]} {job['status']}{exit_code}: "
        f"{job['status_reason'] or 'no reason given'}",
        EXIT_FAILED,
    )


def stream_logs(portal: Portal, ident: str, *, follow: bool) -> dict:
    """Write the job's output to stdout from the start; with ``follow``, until it ends. Gives
    the job as it last was."""
    offset = 0
    while True:
        piece = portal.get(f"/api/v1/jobs/{ident}/logs/", params={"offset": offset})
        if piece["text"]:
            sys.stdout.write(piece["text"])
            sys.stdout.flush()
        offset = piece["next_offset"]
        if offset < piece["size"]:
            continue  # more is held already: read on without waiting
        if not follow or piece["ended"]:
            if piece["capped"]:
                note("(the portal stopped keeping this job's output at its cap)")
            return portal.get(f"/api/v1/jobs/{ident}/")
        time.sleep(POLL_SECONDS)


@jobs_app.command("list", epilog="Example: gpu jobs list --status running --json")
def list_jobs(
    status: Annotated[str | None, typer.Option(help="Only this status, e.g. running.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Jobs of your projects, newest first."""
    params = {"status": status} if status else {}
    rows = connect().everything("/api/v1/jobs/", params)
    if as_json:
        print_json(rows)
        return
    table(
        ["JOB", "NAME", "STATUS", "TYPE", "MARKET", "OWNER", "CREATED", "RECOVERIES", "COST $"],
        [
            (
                row["id"][:8],
                row["name"],
                row["status"],
                row["instance_type"],
                row["market"],
                row["owner"],
                when(row["created_at"]),
                row["recoveries"],
                row["cost"],
            )
            for row in rows
        ],
        empty="No jobs.",
    )


@jobs_app.command(epilog="Example: gpu jobs show 3f2a")
def show(
    ref: Annotated[str, typer.Argument(metavar="JOB", help="Its id or the start of it.")],
    as_json: JsonOption = False,
) -> None:
    """One job: its status and reason, runs, hosts and cost."""
    portal = connect()
    job = portal.get(f"/api/v1/jobs/{job_id(portal, ref)}/")
    if as_json:
        print_json(job)
        return
    fields(
        [
            ("job", f"{job['name']} ({job['id']})"),
            (
                "status",
                job["status"] + (f": {job['status_reason']}" if job["status_reason"] else ""),
            ),
            ("command", job["command"]),
            (
                "type",
                ("" if job["nodes"] == 1 else f"cluster of {job['nodes']} × ")
                + f"{job['instance_type']}, {job['market']}, image {job['image']}",
            ),
            ("project", f"{job['project']} (owner {job['owner']})"),
            ("started", when(job["started_at"])),
            ("ended", when(job["ended_at"])),
            ("exit code", job["exit_code"]),
            ("recoveries", job["recoveries"]),
            ("checkpoints", job["checkpoint_uri"]),
            ("cost", f"${job['cost']}"),
        ]
    )
    for run in job["runs"]:
        rank = f" rank {run['rank']}" if job["nodes"] > 1 else ""
        out.print(
            f"  run {run['number']}{rank} on {run['host'][:8]}: {run['outcome'] or 'running'} "
            f"(started {when(run['started_at'])})",
            markup=False,
        )


@jobs_app.command(epilog="Example: gpu jobs logs -f 3f2a | tee train.log")
def logs(
    ref: Annotated[str, typer.Argument(metavar="JOB")],
    follow: Annotated[
        bool,
        typer.Option(
            "--follow", "-f", help="Keep printing until the job ends (exit 3 unless it succeeded)."
        ),
    ] = False,
) -> None:
    """A job's output, every run one after the other."""
    portal = connect()
    job = stream_logs(portal, job_id(portal, ref), follow=follow)
    if follow:
        _exit_as(job)


@jobs_app.command(epilog="Example: gpu jobs cancel 3f2a")
def cancel(refs: Annotated[list[str], typer.Argument(metavar="JOB...")]) -> None:
    """Cancel jobs that have not ended: the command is stopped and its host ends."""
    portal = connect()
    for ref in refs:
        job = portal.post(f"/api/v1/jobs/{job_id(portal, ref)}/cancel/")
        note(f"Job {job['id'][:8]} ({job['name']}): {job['status']}")


@jobs_app.command(epilog="Example: gpu jobs rerun 3f2a --follow")
def rerun(
    ref: Annotated[str, typer.Argument(metavar="JOB")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Print the new job's output until it ends.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Run an ended job again with the same settings, as a new job."""
    portal = connect()
    job = portal.post(f"/api/v1/jobs/{job_id(portal, ref)}/rerun/")
    note(f"Launched job {job['id']} ({job['name']}), a re-run of {job['rerun_of']}.")
    if follow:
        job = stream_logs(portal, job["id"], follow=True)
    if as_json:
        print_json(job)
    if follow:
        _exit_as(job)


def register(app: typer.Typer) -> None:
    app.add_typer(jobs_app, name="jobs")
