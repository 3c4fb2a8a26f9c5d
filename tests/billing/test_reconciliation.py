"""Reconciling an AWS Cost and Usage Report with metering, host by host (S3 against moto)."""

from __future__ import annotations

import csv
import gzip
import io
import json
import uuid
from decimal import Decimal

import boto3
import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from moto import mock_aws

from billing.lib.money import RS_PER_DOLLAR
from billing.models import CurImport, CurResult
from billing.services.cur import cur_import, within_tolerance
from instances.models import Instance

LEGACY_HEADER = [
    "identity/LineItemId",
    "lineItem/LineItemType",
    "lineItem/UsageStartDate",
    "lineItem/UsageEndDate",
    "lineItem/ProductCode",
    "lineItem/UsageType",
    "lineItem/ResourceId",
    "lineItem/UnblendedCost",
    "resourceTags/user:portal:instance",
]


@pytest.fixture
def fleet(host, run, at, meter, bob):
    """Three metered hosts with cloud ids: $10.06, $3.018 and $1.006 of on-demand."""
    hosts = []
    for number, hours in enumerate((10, 3, 1)):
        instance = run(host(user=bob), at(hours=1), at(hours=1 + hours))
        Instance.objects.filter(pk=instance.pk).update(cloud_id=f"i-0portal{number:09d}")
        instance.refresh_from_db()
        hosts.append(instance)
    meter(now=at(hours=20))
    return hosts


def legacy_csv(at, rows) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(LEGACY_HEADER)
    start, end = at().strftime("%Y-%m-%dT%H:%M:%SZ"), at(hours=24).strftime("%Y-%m-%dT%H:%M:%SZ")
    for number, (line_type, product, resource, cost, tag) in enumerate(rows):
        writer.writerow(
            [
                f"line-{number}",
                line_type,
                start,
                end,
                product,
                "BoxUsage:g5.xlarge",
                resource,
                cost,
                tag,
            ]
        )
    return out.getvalue().encode()


def test_matched_mismatched_unknown_and_missing_hosts_are_told_apart(fleet, at, fin):
    first, second, third = fleet
    stranger = str(uuid.uuid4())
    data = legacy_csv(
        at,
        [
            ("Usage", "AmazonEC2", first.cloud_id, "10.0600000000", str(first.pk)),  # exact
            ("Usage", "AmazonEC2", second.cloud_id, "2.5000000000", str(second.pk)),  # $0.52 off
            ("Usage", "AmazonEC2", "i-0ghost000000001", "4.2000000000", stranger),  # not ours
            ("Usage", "AmazonEC2", "vol-0abc", "0.8000000000", str(first.pk)),  # a volume of ours
            ("Usage", "AmazonEC2", "i-0someoneelses", "99.0000000000", ""),  # not the portal's
            ("Tax", "AmazonEC2", first.cloud_id, "1.0000000000", str(first.pk)),  # not usage
        ],
    )
    imported = cur_import(data=data, source="upload:nov.csv", actor=fin)
    results = {r.resource_id: r for r in imported.results.all()}
    assert results[first.cloud_id].status == CurResult.Status.MATCHED
    assert results[second.cloud_id].status == CurResult.Status.MISMATCHED
    assert results["i-0ghost000000001"].status == CurResult.Status.UNKNOWN
    assert results[third.cloud_id].status == CurResult.Status.NOT_IN_BILL
    assert results[third.cloud_id].portal_cost_rs == 3600 * 1_006_000
    assert "i-0someoneelses" not in results and "vol-0abc" not in results
    assert imported.summary["other_cost_of_known_hosts"] == "0.8000000000"
    assert imported.summary["lines_not_from_the_portal"] == 1
    assert (imported.first_day, imported.last_day) == (at().date(), at().date())
    assert imported.lines_read == 6


def test_a_host_is_found_by_its_tag_when_the_bill_has_another_resource_id(fleet, at, fin):
    first = fleet[0]
    data = legacy_csv(at, [("Usage", "AmazonEC2", "i-0renamed", "10.06", str(first.pk))])
    imported = cur_import(data=data, source="upload:x.csv", actor=fin)
    # The resource id is not the one recorded, but the tag names the host: it is known. As an
    # instance-hours line of a known host it is compared.
    result = imported.results.get(instance=first)
    assert result.status == CurResult.Status.MATCHED


# (bill, metered) -> matched: within max($0.01, 0.5 % of the bill)
TOLERANCE = [
    ("1.00", "1.01", True),
    ("1.00", "1.0101", False),
    ("10.00", "10.05", True),
    ("10.00", "10.0501", False),
    ("100.00", "99.50", True),
    ("100.00", "99.4999", False),
    ("0", "0.01", True),
    ("0", "0.0101", False),
]


@pytest.mark.parametrize(("bill", "metered", "matched"), TOLERANCE)
def test_the_tolerance_is_the_larger_of_a_cent_and_half_a_percent(bill, metered, matched):
    assert within_tolerance(Decimal(bill), int(Decimal(metered) * RS_PER_DOLLAR)) is matched


def test_cur_2_0_with_a_resource_tags_map_is_read_too(fleet, at, fin):
    first = fleet[0]
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(
        [
            "line_item_line_item_type",
            "line_item_usage_start_date",
            "line_item_usage_end_date",
            "line_item_product_code",
            "line_item_resource_id",
            "line_item_unblended_cost",
            "resource_tags",
        ]
    )
    writer.writerow(
        [
            "Usage",
            at().strftime("%Y-%m-%d %H:%M:%S"),
            at(hours=24).strftime("%Y-%m-%d %H:%M:%S"),
            "AmazonEC2",
            first.cloud_id,
            "10.06",
            json.dumps({"user:portal:instance": str(first.pk)}),
        ]
    )
    writer.writerow(
        [
            "Usage",
            at().strftime("%Y-%m-%d %H:%M:%S"),
            at(hours=24).strftime("%Y-%m-%d %H:%M:%S"),
            "AmazonEC2",
            "i-0lost",
            "1.00",
            json.dumps({"user:portal:instance": str(uuid.uuid4())}),
        ]
    )
    imported = cur_import(data=out.getvalue().encode(), source="upload:cur2.csv", actor=fin)
    statuses = dict(imported.results.values_list("resource_id", "status"))
    assert statuses[first.cloud_id] == "matched"
    assert statuses["i-0lost"] == "unknown"


def test_a_gzipped_report_is_unpacked(fleet, at, fin):
    data = gzip.compress(legacy_csv(at, [("Usage", "AmazonEC2", fleet[0].cloud_id, "10.06", "")]))
    imported = cur_import(data=data, source="upload:nov.csv.gz", actor=fin)
    assert imported.results.get(resource_id=fleet[0].cloud_id).status == "matched"


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"name,cost\nx,1\n", "not a Cost and Usage Report"),
        (b"\x1f\x8bnot really gzip", "does not unpack"),
        (b"lineItem/ResourceId,lineItem/UnblendedCost\ni-1,2\n", "lacks the columns"),
    ],
)
def test_a_file_that_is_not_a_cur_is_refused_with_a_reason(fin, data, says, db):
    with pytest.raises(ValidationError) as refused:
        cur_import(data=data, source="upload:bad", actor=fin)
    assert says in " ".join(refused.value.messages)
    assert not CurImport.objects.exists()


@pytest.fixture
def s3(monkeypatch):
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="billing-reports")
        yield client


def test_a_report_is_imported_from_s3(fleet, at, fin, s3, client):
    s3.put_object(
        Bucket="billing-reports",
        Key="cur/2026/report-1.csv.gz",
        Body=gzip.compress(
            legacy_csv(at, [("Usage", "AmazonEC2", fleet[0].cloud_id, "10.06", "")])
        ),
    )
    client.force_login(fin)
    response = client.post(
        "/costs/reconciliation/", {"bucket": "billing-reports", "key": "cur/2026/report-1.csv.gz"}
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    imported = CurImport.objects.get()
    assert imported.source == "s3://billing-reports/cur/2026/report-1.csv.gz"
    assert imported.results.get(resource_id=fleet[0].cloud_id).status == "matched"


def test_a_missing_s3_key_is_a_clear_error(fin, s3, client, db):
    client.force_login(fin)
    response = client.post("/costs/reconciliation/", {"bucket": "billing-reports", "key": "nope"})
    assert response.status_code == 400
    assert "Could not read s3://billing-reports/nope: NoSuchKey" in response.content.decode()


def test_the_command_imports_from_s3(fleet, at, s3):
    s3.put_object(
        Bucket="billing-reports",
        Key="r.csv",
        Body=legacy_csv(at, [("Usage", "AmazonEC2", fleet[1].cloud_id, "3.02", "")]),
    )
    out = io.StringIO()
    call_command("cur_import", "s3://billing-reports/r.csv", stdout=out)
    assert "1 matched" in out.getvalue()


def test_upload_page_shows_results_and_the_csv(fleet, at, fin, client):
    client.force_login(fin)
    upload = io.BytesIO(
        legacy_csv(
            at,
            [
                ("Usage", "AmazonEC2", fleet[0].cloud_id, "10.06", ""),
                ("Usage", "AmazonEC2", fleet[1].cloud_id, "9.99", ""),
            ],
        )
    )
    upload.name = "november.csv"
    response = client.post("/costs/reconciliation/", {"report": upload}, follow=True)
    page = response.content.decode()
    assert response.status_code == 200
    assert 'data-status="mismatched"' in page and fleet[1].cloud_id in page
    run = CurImport.objects.get()
    download = client.get(f"/costs/reconciliation.csv?run={run.pk}")
    rows = list(csv.DictReader(io.StringIO(b"".join(download.streaming_content).decode())))
    by_id = {row["resource_id"]: row for row in rows}
    assert by_id[fleet[0].cloud_id]["status"] == "matched"
    assert by_id[fleet[1].cloud_id]["difference_usd"] == "6.972"  # 9.99 - 3.018
    assert by_id[fleet[2].cloud_id]["status"] == "not_in_bill"


def test_bill_text_that_looks_like_a_formula_is_defused_in_the_csv(fleet, at, fin, client):
    """A CUR line is outside data: a resource id or tag written as a formula must reach the
    spreadsheet as text, not run."""
    formula = '=HYPERLINK("http://evil.example/","click")'
    client.force_login(fin)
    upload = io.BytesIO(
        legacy_csv(at, [("Usage", "AmazonEC2", "i-0aaaaaaaaaaaaaaaa", "1.00", formula)])
    )
    upload.name = "odd.csv"
    client.post("/costs/reconciliation/", {"report": upload})
    download = client.get(f"/costs/reconciliation.csv?run={CurImport.objects.get().pk}")
    rows = list(csv.DictReader(io.StringIO(b"".join(download.streaming_content).decode())))
    (odd,) = [row for row in rows if row["resource_id"] == "i-0aaaaaaaaaaaaaaaa"]
    assert odd["portal_instance"] == "'" + formula
    assert odd["bill_usd"] == "1"  # numbers are left alone


def test_researchers_may_not_reconcile(client, alice):
    client.force_login(alice)
    assert client.get("/costs/reconciliation/").status_code == 403
    assert client.get("/costs/reconciliation.csv").status_code == 403


def test_without_an_import_the_csv_is_404(client, fin):
    client.force_login(fin)
    assert client.get("/costs/reconciliation.csv").status_code == 404


def upload_of(at, fleet, name="november.csv"):
    upload = io.BytesIO(
        legacy_csv(
            at,
            [
                ("Usage", "AmazonEC2", fleet[0].cloud_id, "10.06", ""),  # matched
                ("Usage", "AmazonEC2", fleet[1].cloud_id, "9.99", ""),  # $6.972 over
            ],
        )
    )
    upload.name = name
    return upload


def test_mismatches_come_before_matched_rows_on_the_page_and_in_the_csv(fleet, at, fin, client):
    client.force_login(fin)
    page = client.post("/costs/reconciliation/", {"report": upload_of(at, fleet)}, follow=True)
    text = page.content.decode()
    assert text.index('<tr class="recon-mismatched"') < text.index('<tr class="recon-matched"')
    run = CurImport.objects.get()
    download = client.get(f"/costs/reconciliation.csv?run={run.pk}")
    rows = list(csv.DictReader(io.StringIO(b"".join(download.streaming_content).decode())))
    assert [row["status"] for row in rows] == ["mismatched", "not_in_bill", "matched"]


def test_the_page_sets_the_bill_total_against_the_metered_total(fleet, at, fin, client):
    client.force_login(fin)
    page = client.post("/costs/reconciliation/", {"report": upload_of(at, fleet)}, follow=True)
    text = page.content.decode()
    # Bill: 10.06 + 9.99; metered: 10.06 + 3.018 + 1.006 (the third host is not in the bill).
    assert 'data-agree="false"' in text
    assert "$20.05" in text and "$14.08" in text and "$5.97" in text
    assert "The totals differ by more than max($0.01, 0.5 %) of the bill" in text
    run = CurImport.objects.get()
    assert run.totals() == (Decimal("20.05"), (10_060_000 + 3_018_000 + 1_006_000) * 3600)
    assert run.summary["bill_total"] == "20.05"


def test_the_same_report_imported_again_replaces_its_comparison(fleet, at, fin, client):
    client.force_login(fin)
    client.post("/costs/reconciliation/", {"report": upload_of(at, fleet)})
    first = CurImport.objects.get()
    # The same bytes gzipped, under another name: still the same report.
    again = io.BytesIO(gzip.compress(upload_of(at, fleet).getvalue()))
    again.name = "november-again.csv.gz"
    page = client.post("/costs/reconciliation/", {"report": again}, follow=True)
    (second,) = CurImport.objects.all()
    assert second.pk != first.pk
    assert second.summary["replaced"][0]["id"] == first.pk
    assert "The same report was imported before" in page.content.decode()
    assert "this comparison replaces it" in page.content.decode()
    assert CurResult.objects.filter(cur_import_id=first.pk).count() == 0
    # Another report is a comparison of its own.
    other = io.BytesIO(legacy_csv(at, [("Usage", "AmazonEC2", fleet[0].cloud_id, "10.06", "")]))
    other.name = "other.csv"
    client.post("/costs/reconciliation/", {"report": other})
    assert CurImport.objects.count() == 2


def test_the_command_says_when_an_import_replaces_an_earlier_one(fleet, at, tmp_path):
    path = tmp_path / "nov.csv"
    path.write_bytes(legacy_csv(at, [("Usage", "AmazonEC2", fleet[0].cloud_id, "10.06", "")]))
    call_command("cur_import", str(path), stdout=io.StringIO())
    out = io.StringIO()
    call_command("cur_import", str(path), stdout=out)
    assert "this comparison replaces it" in out.getvalue()
    assert CurImport.objects.count() == 1
