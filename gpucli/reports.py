"""Pools, costs and approvals: ``gpu pools`` (/api/v1/pools/), ``gpu costs``
(/api/v1/costs/, the cost report: money exactly as the portal rounds it) and ``gpu approvals``
(orders waiting for a decision, /api/v1/orders/?status=pending_approval, and approve/reject)."""

from __future__ import annotations

import calendar
import re
import sys
from datetime import UTC, datetime
from typing import Annotated

import typer

from gpucli.client import EXIT_REFUSED, EXIT_USAGE, Portal, connect, fail
from gpucli.output import JsonOption, choices, note, out, print_json, table, when

Market = choices("Market", ("on_demand", "spot"))
Group = choices("Group", ("project", "user", "instance_type", "gpu_model", "market", "pool"))
MONTH = re.compile(r"^(\d{4})-(\d{2})$")


def pools(as_json: JsonOption = False) -> None:
    """Pools of your projects: their sizes and what runs in them now."""
    rows = connect().everything("/api/v1/pools/")
    if as_json:
        print_json(rows)
        return
    table(
        ["POOL", "PROJECT", "TYPE", "STATUS", "MIN/DESIRED/MAX", "ON-DEMAND", "SPOT", "PENDING"],
        [
            (
                row["name"],
                row["project"],
                row["instance_type"],
                row["status"],
                f"{row['min_size']}/{row['desired']}/{row['max_size']}",
                row["running_on_demand"],
                row["running_spot"],
                row["pending"],
            )
            for row in rows
        ],
        empty="No pools.",
    )


def _month_days(month: str) -> tuple[str, str]:
    match = MONTH.match(month)
    if not match or not 1 <= int(match.group(2)) <= 12:
        raise typer.BadParameter(f"{month!r} is not a month such as 2026-11.", param_hint="--month")
    year, number = int(match.group(1)), int(match.group(2))
    last = calendar.monthrange(year, number)[1]
    return f"{year:04d}-{number:02d}-01", f"{year:04d}-{number:02d}-{last:02d}"


def costs(
    month: Annotated[
        str | None, typer.Option(help="A UTC month, e.g. 2026-11 (default: this one).")
    ] = None,
    start: Annotated[
        str | None, typer.Option(help="First UTC day (YYYY-MM-DD), instead of --month.")
    ] = None,
    end: Annotated[str | None, typer.Option(help="Last UTC day, included.")] = None,
    by: Annotated[Group, typer.Option("--by", help="What a line is.")] = "project",
    project: Annotated[str | None, typer.Option(help="Only this project.")] = None,
    market: Annotated[Market | None, typer.Option(help="Only this market.")] = None,
    instance_type: Annotated[
        str | None, typer.Option("--type", help="Only this instance type.")
    ] = None,
    csv: Annotated[
        bool, typer.Option("--csv", help="Print the report as CSV (the portal's own).")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """What hosts cost, grouped: dollars as the portal rounds them (lines add up to the total)."""
    if month and (start or end):
        raise typer.BadParameter("give --month or --start/--end, not both.", param_hint="--month")
    if not (start or end):
        start, end = _month_days(month or datetime.now(UTC).strftime("%Y-%m"))
    params = {"group_by": str(by), "granularity": "month"}
    for name, value in (
        ("start", start),
        ("end", end),
        ("project", project),
        ("market", market and str(market)),
        ("instance_type", instance_type),
    ):
        if value:
            params[name] = value
    portal = connect()
    if csv:
        response = portal.request("GET", "/api/v1/costs/", params={**params, "format": "csv"})
        sys.stdout.write(response.text)
        return
    report = portal.get("/api/v1/costs/", params=params)
    if as_json:
        print_json(report)
        return
    total = report["total"]
    table(
        [
            by.upper().replace("_", " "),
            "COST $",
            "ON-DEMAND $",
            "SPOT $",
            "SAVED $",
            "GPU-H",
            "SHARE %",
        ],
        [
            (
                group["label"],
                group["cost"],
                group["on_demand"],
                group["spot"],
                group["savings"],
                group["gpu_hours"],
                group["share_percent"],
            )
            for group in report["groups"]
        ]
        + [
            (
                "total",
                total["cost"],
                total["on_demand"],
                total["spot"],
                total["savings"],
                total["gpu_hours"],
                "100.0",
            )
        ],
        empty="",
    )
    out.print(
        f"{report['start']} to {report['end']} (UTC), {report['currency']}; spot "
        f"{total['spot_percent']} % of the spend, {total['savings_percent']} % saved against "
        "on-demand.",
        markup=False,
    )


approvals_app = typer.Typer(
    help="Orders waiting for a decision (admins and the project's managers decide them).",
    invoke_without_command=True,
)


@approvals_app.callback()
def approvals(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """Orders waiting for approval that you can see; approve or reject them by id."""
    if ctx.invoked_subcommand is not None:
        return
    rows = connect().everything("/api/v1/orders/", {"status": "pending_approval"})
    if as_json:
        print_json(rows)
        return
    table(
        ["ORDER", "PROJECT", "REQUESTER", "HOSTS", "MARKET", "EST $/H", "PLACED", "WHY IT WAITS"],
        [
            (
                row["id"][:8],
                row["project"],
                row["requester"],
                (f"pool {row['pool']['name']}, up to " if row.get("pool") else "")
                + f"{row['count']}x {row['instance_type']}",
                row["market"],
                row["estimate"]["per_hour"],
                when(row["created_at"]),
                row["approval_reason"],
            )
            for row in rows
        ],
        empty="No orders wait for approval.",
    )


def _pending(portal: Portal, ref: str) -> str:
    start = ref.lower()
    if len(start) < 4 or not re.fullmatch(r"[0-9a-f-]+", start):
        fail(f"{ref!r} is not an order: give its id or 4+ characters of it.", EXIT_USAGE)
    found = [
        row["id"]
        for row in portal.pages("/api/v1/orders/", {"status": "pending_approval"})
        if row["id"].startswith(start)
    ]
    if len(found) == 1:
        return found[0]
    if not found:
        fail(
            f"No order waiting for approval has an id starting {ref}; `gpu approvals` lists them.",
            EXIT_REFUSED,
        )
    fail(f"{ref} starts {len(found)} orders' ids; give more of it.", EXIT_USAGE)


@approvals_app.command(epilog="Example: gpu approvals approve 3f2a --reason 'deadline on Friday'")
def approve(
    ref: Annotated[str, typer.Argument(metavar="ORDER", help="Its id or the start of it.")],
    reason: Annotated[str, typer.Option(help="Why (the requester reads it).")] = "",
) -> None:
    """Approve an order: its hosts are provisioned (a pool's: the pool may grow to its size)."""
    portal = connect()
    order = portal.post(f"/api/v1/orders/{_pending(portal, ref)}/approve/", {"reason": reason})
    note(f"Order {order['id'][:8]} of {order['requester']}: {order['status']}.")


@approvals_app.command(epilog="Example: gpu approvals reject 3f2a --reason 'use spot for this'")
def reject(
    ref: Annotated[str, typer.Argument(metavar="ORDER")],
    reason: Annotated[str, typer.Option(help="Why (required; the requester reads it).")],
) -> None:
    """Reject an order, saying why."""
    portal = connect()
    order = portal.post(f"/api/v1/orders/{_pending(portal, ref)}/reject/", {"reason": reason})
    note(f"Order {order['id'][:8]} of {order['requester']}: {order['status']}.")


def register(app: typer.Typer) -> None:
    app.command("pools", epilog="Example: gpu pools --json")(pools)
    app.command("costs", epilog="Example: gpu costs --month 2026-11 --by market")(costs)
    app.add_typer(
        approvals_app,
        name="approvals",
        epilog="Example: gpu approvals, then gpu approvals approve 3f2a",
    )
