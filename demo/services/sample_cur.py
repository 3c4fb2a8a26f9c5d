"""A sample AWS Cost and Usage Report for the demo's last week, and its reconciliation.

The bill is what the simulated cloud would charge for the hosts the portal metered (the same
seconds at the same rates), plus what a real bill has besides: each host's EBS volume (not
metered by the portal), two hosts the cloud billed differently (a mismatch each way), a host the
bill leaves out, a host tagged by hand that the portal never launched, and another team's
instances. It is imported as finance would upload it, and kept under var/demo/ to upload again.
"""

from __future__ import annotations

import csv
import io
import random
import uuid
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db.models import Sum

from billing.lib.money import RS_PER_DOLLAR
from billing.models import CurImport, Usage
from billing.services.cur import LEGACY, LEGACY_TAG, cur_import
from portal.models import User

DAYS = 7
SOURCE_PREFIX = "sample-cur-"
COLUMNS = [
    "identity/LineItemId",
    LEGACY["start"],
    LEGACY["end"],
    LEGACY["product"],
    "lineItem/UsageType",
    LEGACY["line_type"],
    LEGACY["resource"],
    LEGACY["cost"],
    LEGACY_TAG,
]


def _dollars(rs: int) -> Decimal:
    return (Decimal(rs) / RS_PER_DOLLAR).quantize(Decimal("0.00000001"))


def sample_cur(now: datetime) -> tuple[str, bytes]:
    """The report's file name and CSV bytes for the DAYS whole days before ``now``'s day."""
    rng = random.Random(f"sample-cur:{now.date()}")  # noqa: S311 - repeatable, not a secret
    last = now.date() - timedelta(days=1)
    first = last - timedelta(days=DAYS - 1)
    pieces = (
        Usage.objects.filter(day__gte=first, day__lte=last)
        .values("instance_id", "instance__cloud_id", "instance_type__name", "market", "day")
        .annotate(cost=Sum("cost_rs"))
        .order_by("instance__cloud_id", "day")
    )
    hosts = sorted({row["instance_id"] for row in pieces}, key=str)
    left_out = hosts[len(hosts) // 2] if len(hosts) > 3 else None
    over, under = (hosts[1], hosts[-2]) if len(hosts) > 3 else (None, None)
    rows = []

    def line(day, product, usage_type, resource, cost: Decimal, tag: str = "") -> None:
        rows.append(
            {
                COLUMNS[0]: uuid.UUID(int=rng.getrandbits(128)).hex,
                LEGACY["start"]: f"{day}T00:00:00Z",
                LEGACY["end"]: f"{day + timedelta(days=1)}T00:00:00Z",
                LEGACY["product"]: product,
                "lineItem/UsageType": usage_type,
                LEGACY["line_type"]: "Usage",
                LEGACY["resource"]: resource,
                LEGACY["cost"]: f"{cost:.8f}",
                LEGACY_TAG: tag,
            }
        )

    for row in pieces:
        if row["instance_id"] == left_out or not row["instance__cloud_id"]:
            continue
        cost = _dollars(row["cost"])
        if row["instance_id"] == over:
            cost *= Decimal("1.06")  # the cloud billed the boot minutes the portal did not
        elif row["instance_id"] == under:
            cost *= Decimal("0.9")
        kind = "SpotUsage" if row["market"] == "spot" else "BoxUsage"
        tag = str(row["instance_id"])
        line(
            row["day"],
            "AmazonEC2",
            f"{kind}:{row['instance_type__name']}",
            row["instance__cloud_id"],
            cost,
            tag,
        )
        volume = f"vol-{uuid.UUID(tag).hex[:17]}"
        line(row["day"], "AmazonEC2", "EBS:VolumeUsage.gp3", volume, Decimal("0.53333333"), tag)
    stranger = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    for offset in range(2):
        day = first + timedelta(days=offset)
        line(
            day,
            "AmazonEC2",
            "BoxUsage:g5.xlarge",
            "i-0f00d5ca1ab1e0042",
            Decimal("24.144"),
            stranger,
        )
    for offset in range(3):
        day = first + timedelta(days=offset * 2)
        line(day, "AmazonEC2", "BoxUsage:m7i.large", f"i-0a7e4m{offset:011d}", Decimal("2.4192"))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS)
    writer.writeheader()
    writer.writerows(rows)
    return f"{SOURCE_PREFIX}{first}-to-{last}.csv", out.getvalue().encode()


def sample_cur_import(*, now: datetime) -> int:
    """Import the sample as fin would (once per report); return the hosts it compared."""
    name, data = sample_cur(now)
    if CurImport.objects.filter(source=name).exists():
        return 0
    folder = settings.VAR_DIR / "demo"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)
    if data.count(b"\n") < 2:
        return 0
    imported = cur_import(data=data, source=name, actor=User.objects.get(username="fin"))
    return imported.results.count()
