"""Reading an AWS Cost and Usage Report, comparing it with metered usage host by host, and
keeping the result (``cur_import``, the writer).

Both CSV shapes are read: the legacy CUR (``lineItem/ResourceId``, tags as
``resourceTags/user:portal:instance``) and CUR 2.0 from Data Exports (``line_item_resource_id``,
tags in the ``resource_tags`` map). Gzipped files are unpacked. Only usage lines count (Usage,
DiscountedUsage, SavingsPlanCoveredUsage; not tax, credits, refunds or fees), at their
unblended cost.

The comparison covers the whole UTC days the report spans. For each EC2 instance id in the bill
that the portal knows (by cloud id, else by its ``portal:instance`` tag): matched when the two
costs are within max($0.01, 0.5 % of the bill's cost), else mismatched. Resources tagged by the
portal that it does not know are listed as unknown; hosts the portal metered that the bill does
not list, as not in the bill. Other lines of known hosts (volumes, data transfer) are summed
apart: the portal does not meter them.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from fractions import Fraction

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Sum

from audit.services import audit_record_system
from billing.lib.money import RS_PER_DOLLAR
from billing.models import CurImport, CurResult, Usage
from billing.selectors.reports import FIRST_DAY, LAST_DAY
from instances.models import Instance
from instances.providers.base import TAG_INSTANCE
from portal import permissions
from portal.lib.errors import Forbidden
from portal.models import User

USAGE_LINE_TYPES = {"Usage", "DiscountedUsage", "SavingsPlanCoveredUsage"}
TOLERANCE_DOLLARS = Decimal("0.01")
TOLERANCE_SHARE = Fraction(5, 1000)

LEGACY = {
    "resource": "lineItem/ResourceId",
    "cost": "lineItem/UnblendedCost",
    "line_type": "lineItem/LineItemType",
    "start": "lineItem/UsageStartDate",
    "end": "lineItem/UsageEndDate",
    "product": "lineItem/ProductCode",
}
CUR2 = {
    "resource": "line_item_resource_id",
    "cost": "line_item_unblended_cost",
    "line_type": "line_item_line_item_type",
    "start": "line_item_usage_start_date",
    "end": "line_item_usage_end_date",
    "product": "line_item_product_code",
}
LEGACY_TAG = f"resourceTags/user:{TAG_INSTANCE}"
CUR2_TAG_MAP = "resource_tags"
CUR2_TAG_KEY = f"user:{TAG_INSTANCE}"
CUR2_TAG_COLUMN = "resource_tags_user_" + TAG_INSTANCE.replace(":", "_")


@dataclass(frozen=True)
class Line:
    resource_id: str
    tag_instance: str
    cost: Decimal
    start: datetime
    end: datetime
    is_instance_usage: bool  # an EC2 instance's own usage (not its volume, not transfer)


@dataclass
class Report:
    lines: list[Line]
    lines_read: int
    # SHA-256 of the unpacked CSV: the same report, gzipped or not, from a file or S3.
    digest: str = ""

    @property
    def lines_compared(self) -> int:
        return len(self.lines)


def _when(text: str, column: str, row_number: int) -> datetime:
    value = text.strip().replace("Z", "+00:00").replace(" ", "T", 1)
    try:
        moment = datetime.fromisoformat(value)
        moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except (ValueError, OverflowError):
        raise ValidationError(
            f"Line {row_number}: {column} is {text[:40]!r}, not a date and time.",
            code="invalid_cur",
        ) from None
    # The days a report covers (the comparison steps a day past the last one).
    if not FIRST_DAY <= moment.date() <= LAST_DAY:
        raise ValidationError(
            f"Line {row_number}: {column} is {moment.date()}, outside the days the portal "
            f"reconciles ({FIRST_DAY} to {LAST_DAY}).",
            code="invalid_cur",
        )
    return moment


def _tag(row: dict, columns: dict) -> str:
    if columns is LEGACY:
        return (row.get(LEGACY_TAG) or "").strip()
    if row.get(CUR2_TAG_COLUMN):
        return row[CUR2_TAG_COLUMN].strip()
    raw = (row.get(CUR2_TAG_MAP) or "").strip()
    if not raw:
        return ""
    try:
        tags = json.loads(raw)
    except json.JSONDecodeError:
        return ""
    return str(tags.get(CUR2_TAG_KEY, "")).strip() if isinstance(tags, dict) else ""


def parse(data: bytes) -> Report:
    """Read the usage lines of a CUR CSV (plain or gzipped); raise ValidationError with a
    sentence when the file is not one."""
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as error:
            raise ValidationError(
                "The file looks gzipped but does not unpack.", code="invalid_cur"
            ) from error
    digest = hashlib.sha256(data).hexdigest()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ValidationError(
            "The file is not UTF-8 text; upload the CSV.", code="invalid_cur"
        ) from error
    reader = csv.DictReader(io.StringIO(text))
    header = set(reader.fieldnames or [])
    columns = (
        LEGACY if LEGACY["resource"] in header else CUR2 if CUR2["resource"] in header else None
    )
    if columns is None:
        raise ValidationError(
            "This is not a Cost and Usage Report with resource ids: it has no "
            "lineItem/ResourceId (CUR) or line_item_resource_id (CUR 2.0) column. Turn on "
            "'Include resource IDs' for the report.",
            code="invalid_cur",
        )
    missing = [name for name in columns.values() if name not in header]
    if missing:
        raise ValidationError(
            f"The report lacks the column{'s' if len(missing) > 1 else ''} {', '.join(missing)}.",
            code="invalid_cur",
        )
    lines, read = [], 0
    for number, row in enumerate(reader, start=2):
        read += 1
        if (row.get(columns["line_type"]) or "").strip() not in USAGE_LINE_TYPES:
            continue
        resource = (row.get(columns["resource"]) or "").strip()
        tag = _tag(row, columns)
        if not resource and not tag:
            continue
        try:
            cost = Decimal((row.get(columns["cost"]) or "0").strip() or "0")
        except InvalidOperation:
            raise ValidationError(
                f"Line {number}: {columns['cost']} is {row.get(columns['cost'])!r}, not a number.",
                code="invalid_cur",
            ) from None
        product = (row.get(columns["product"]) or "").strip()
        lines.append(
            Line(
                resource_id=resource,
                tag_instance=tag,
                cost=cost,
                start=_when(row.get(columns["start"]) or "", columns["start"], number),
                end=_when(row.get(columns["end"]) or "", columns["end"], number),
                is_instance_usage=product == "AmazonEC2" and resource.startswith("i-"),
            )
        )
    if not lines:
        raise ValidationError(
            "The report has no usage lines with a resource id or a portal tag.", code="invalid_cur"
        )
    return Report(lines=lines, lines_read=read, digest=digest)


@dataclass
class ResultRow:
    resource_id: str
    tag_instance: str
    instance_id: uuid.UUID | None
    status: str
    cloud_cost: Decimal
    portal_cost_rs: int
    note: str = ""


@dataclass
class Comparison:
    first_day: date
    last_day: date
    rows: list[ResultRow] = field(default_factory=list)
    other_cost_of_known: Decimal = Decimal(0)
    lines_not_ours: int = 0

    def counts(self) -> dict[str, int]:
        found = {status: 0 for status in CurResult.Status.values}
        for row in self.rows:
            found[row.status] += 1
        return found

    def summary(self) -> dict:
        totals: dict[str, dict[str, object]] = {}
        for status in CurResult.Status.values:
            rows = [row for row in self.rows if row.status == status]
            totals[status] = {
                "count": len(rows),
                "cloud_cost": str(sum((row.cloud_cost for row in rows), Decimal(0))),
                "portal_cost_rs": sum(row.portal_cost_rs for row in rows),
            }
        return {
            "by_status": totals,
            "bill_total": str(sum((row.cloud_cost for row in self.rows), Decimal(0))),
            "metered_total_rs": sum(row.portal_cost_rs for row in self.rows),
            "other_cost_of_known_hosts": str(self.other_cost_of_known),
            "lines_not_from_the_portal": self.lines_not_ours,
        }


def within_tolerance(cloud: Decimal, portal_rs: int) -> bool:
    """|bill - portal| ≤ max($0.01, 0.5 % of the bill), compared exactly."""
    difference = abs(Fraction(cloud) - Fraction(portal_rs, RS_PER_DOLLAR))
    allowed = max(Fraction(TOLERANCE_DOLLARS), TOLERANCE_SHARE * abs(Fraction(cloud)))
    return difference <= allowed


def _uuid(text: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(text)
    except (ValueError, AttributeError, TypeError):
        return None


def compare(report: Report) -> Comparison:
    """Match the bill's lines to hosts and compare their cost over the days the bill covers."""
    instance_lines = [line for line in report.lines if line.is_instance_usage] or report.lines
    first_day = min(line.start for line in instance_lines).date()
    last_day = max(max(line.end - timedelta(microseconds=1), line.start) for line in instance_lines)
    comparison = Comparison(first_day=first_day, last_day=last_day.date())

    cloud_ids = {line.resource_id for line in report.lines if line.resource_id}
    tag_ids = {u for line in report.lines if (u := _uuid(line.tag_instance))}
    by_cloud = {
        row.cloud_id: row
        for row in Instance.objects.filter(cloud_id__in=cloud_ids).only("id", "cloud_id")
    }
    by_tag = {row.id: row for row in Instance.objects.filter(id__in=tag_ids).only("id", "cloud_id")}

    billed: dict[uuid.UUID, Decimal] = defaultdict(Decimal)
    resource_of: dict[uuid.UUID, str] = {}
    unknown: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for line in report.lines:
        known = by_cloud.get(line.resource_id)
        if known is None:
            tagged = _uuid(line.tag_instance)
            known = by_tag.get(tagged) if tagged else None
        if known is None:
            if line.tag_instance:
                unknown[(line.resource_id, line.tag_instance)] += line.cost
            else:
                comparison.lines_not_ours += 1
            continue
        if line.is_instance_usage:
            billed[known.id] += line.cost
            resource_of[known.id] = line.resource_id
        else:
            comparison.other_cost_of_known += line.cost

    metered = dict(
        Usage.objects.filter(day__gte=comparison.first_day, day__lte=comparison.last_day)
        .values_list("instance_id")
        .annotate(cost=Sum("cost_rs"))
        .values_list("instance_id", "cost")
    )
    # A shared MIG host is billed by the cloud and metered through its slices: its slices'
    # usage is what the portal set against its bill (and a slice has no bill line of its own).
    hosted = dict(
        Instance.objects.filter(pk__in=list(metered), shared_host__isnull=False).values_list(
            "pk", "shared_host_id"
        )
    )
    for slice_id, host_id in hosted.items():
        metered[host_id] = (metered.get(host_id) or 0) + metered.pop(slice_id)
    for instance_id, cloud_cost in sorted(billed.items(), key=lambda item: resource_of[item[0]]):
        portal = int(metered.get(instance_id) or 0)
        matched = within_tolerance(cloud_cost, portal)
        comparison.rows.append(
            ResultRow(
                resource_id=resource_of[instance_id],
                tag_instance=str(instance_id),
                instance_id=instance_id,
                status=CurResult.Status.MATCHED if matched else CurResult.Status.MISMATCHED,
                cloud_cost=cloud_cost,
                portal_cost_rs=portal,
            )
        )
    for (resource_id, tag), cloud_cost in sorted(unknown.items()):
        comparison.rows.append(
            ResultRow(
                resource_id=resource_id,
                tag_instance=tag,
                instance_id=None,
                status=CurResult.Status.UNKNOWN,
                cloud_cost=cloud_cost,
                portal_cost_rs=0,
                note="tagged portal:instance but no such host in the portal",
            )
        )
    missing = [pk for pk, cost in metered.items() if cost and pk not in billed]
    for row in Instance.objects.filter(pk__in=missing).only("id", "cloud_id").order_by("cloud_id"):
        comparison.rows.append(
            ResultRow(
                resource_id=row.cloud_id or "",
                tag_instance=str(row.pk),
                instance_id=row.pk,
                status=CurResult.Status.NOT_IN_BILL,
                cloud_cost=Decimal(0),
                portal_cost_rs=int(metered[row.pk]),
                note="metered by the portal; the bill has no usage line for it",
            )
        )
    return comparison


def fetch_s3(*, bucket: str, key: str) -> bytes:
    """The bytes of a report in S3 (PORTAL_CUR_S3_ENDPOINT_URL for MinIO or moto)."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError
    from django.conf import settings

    client = boto3.client(
        "s3",
        region_name=settings.PORTAL_REGION,
        endpoint_url=settings.PORTAL_CUR_S3_ENDPOINT_URL or None,
    )
    try:
        return client.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "")
        raise ValidationError(
            f"Could not read s3://{bucket}/{key}: {code or error}.", code="s3_unreadable"
        ) from None
    except BotoCoreError as error:
        raise ValidationError(
            f"Could not reach S3 for s3://{bucket}/{key}: {error}.", code="s3_unreachable"
        ) from None


def cur_import(*, data: bytes, source: str, actor: User | None) -> CurImport:
    """Compare a Cost and Usage Report (CSV, optionally gzipped) with metered usage, host by
    host, and keep the result. Changes nothing the portal bills or runs.

    The same report imported again replaces its earlier comparison (metering may have caught
    up since, so the new one is the truer), instead of listing the report twice; the new
    import's ``summary["replaced"]`` names what it replaced."""
    if actor is not None and not permissions.can_reconcile(actor):
        raise Forbidden("Only finance and admins reconcile the cloud bill.")
    report = parse(data)
    comparison = compare(report)
    with transaction.atomic():
        # Locked so two uploads of one report at once leave one comparison, not two.
        earlier = list(
            CurImport.objects.select_for_update().filter(digest=report.digest).order_by("id")
        )
        summary = comparison.summary()
        summary["replaced"] = [
            {"id": run.pk, "source": run.source, "imported_at": run.imported_at.isoformat()}
            for run in earlier
        ]
        CurImport.objects.filter(pk__in=[run.pk for run in earlier]).delete()
        imported = CurImport.objects.create(
            digest=report.digest,
            source=source[:500],
            imported_by=actor,
            first_day=comparison.first_day,
            last_day=comparison.last_day,
            lines_read=report.lines_read,
            lines_compared=report.lines_compared,
            summary=summary,
        )
        CurResult.objects.bulk_create(
            [
                CurResult(
                    cur_import=imported,
                    resource_id=row.resource_id[:200],
                    tag_instance=row.tag_instance[:100],
                    instance_id=row.instance_id,
                    status=row.status,
                    cloud_cost=row.cloud_cost,
                    portal_cost_rs=row.portal_cost_rs,
                    note=row.note[:300],
                )
                for row in comparison.rows
            ],
            batch_size=1000,
        )
        if actor is None:
            audit_record_system(
                name="cur_import",
                action="import",
                object_ref=f"billing.curimport:{imported.pk}",
                summary={
                    "source": source[:200],
                    "replaced": [run.pk for run in earlier],
                    **comparison.counts(),
                },
            )
    return imported


def cur_import_message(imported: CurImport) -> str:
    """What the page and the command say after an import, naming a comparison it replaced."""
    said = f"Compared {imported.source} with metered usage."
    replaced = imported.summary.get("replaced") or []
    if replaced:
        when = ", ".join(
            datetime.fromisoformat(run["imported_at"]).astimezone(UTC).strftime("%b %-d, %H:%M")
            for run in replaced
        )
        said += f" The same report was imported before ({when} UTC); this comparison replaces it."
    return said


def cur_import_s3(*, bucket: str, key: str, actor: User | None) -> CurImport:
    """Fetch a Cost and Usage Report from S3, then import it as cur_import does."""
    if actor is not None and not permissions.can_reconcile(actor):
        raise Forbidden("Only finance and admins reconcile the cloud bill.")
    return cur_import(
        data=fetch_s3(bucket=bucket, key=key), source=f"s3://{bucket}/{key}", actor=actor
    )
