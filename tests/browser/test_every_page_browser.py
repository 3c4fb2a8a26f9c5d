"""The world every page is visited in, and which pages each persona visits (the visits
themselves, at two widths under the Content-Security-Policy, are
tests/browser/test_narrow_screens_browser.py's; axe's are test_accessibility_browser.py's);
and what moved out of the templates (bar widths, the confirmation before revoking a token)
still works."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import URLResolver, get_resolver
from django.utils import timezone
from playwright.sync_api import expect

from audit.models import AuditEvent
from billing.services.budgets import budget_set
from billing.services.metering import usage_meter
from billing.services.rollups import rollups_refresh
from instances import services
from instances.models import PoolSample
from instances.services import approval_policy_set, quota_set
from instances.services.jobs import (
    job_assignment,
    job_log_append,
    job_run_exited,
    job_run_started,
    job_submit,
)
from portal.models import ApiToken
from portal.services import project_isolation_set, token_issue, webhook_create, webhook_emit
from tests.browser.conftest import answer_confirmation
from tests.conftest import ED25519, PASSWORD
from tests.test_route_matrix import NOT_HERE, PAGE_METHODS

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Page routes (GET, HTML) that are not whole pages of their own, and why.
NOT_A_PAGE = {
    "home": "redirects to the dashboard",
    "host-rows": "an htmx fragment of the hosts page, swapped in while it is open",
    "host-panel": "an htmx fragment of a host's page, swapped in while it is open",
    "order-estimate-panel": "an htmx fragment of the order page",
    "pool-panel": "an htmx fragment of a pool's page, swapped in while it is open",
    "pool-chart": "the series a pool page's chart fetches (JSON)",
    "pool-preview": "an htmx fragment of the new pool form",
    "job-panel": "an htmx fragment of a job's page, swapped in while it is open",
    "job-log": "an htmx fragment of a job's log, appended while it is open",
    "job-log-file": "a download",
    "job-metrics": "the series a job page's metric charts fetch (JSON)",
    "job-tensorboard": "TensorBoard's own app under its own policy (test_job_tensorboard.py)",
    "job-tensorboard-data": "TensorBoard's assets and data",
    "tensorboard-font": "a font TensorBoard's pages load",
    "notebook": "a host's JupyterLab, its own app (tests/browser/test_notebook_browser.py)",
    "notebook-path": "JupyterLab's pages and API, through the portal",
    "audit-export-csv": "a download",
    "audit-export-jsonl": "a download",
    "costs-csv": "a download",
    "reconciliation-csv": "a download (no bill imported here)",
}


@pytest.fixture
def world(alice, bob, ada, fin, projects, running_host, place_order):
    """alice runs an on-demand and a spot host with a month of spend metered; vision-lab has a
    quota, an approval policy with bob's order waiting, and a budget; alice has a token."""
    vision = projects["vision-lab"]
    host = running_host()
    running_host(market="spot")
    quota_set(project=vision, actor=ada, max_gpus=8)
    approval_policy_set(project=vision, actor=ada, gpus_above=2)
    # Its own network and key, with a history of two changes (the project's page shows both).
    project_isolation_set(project=vision, actor=ada, tenancy="dedicated")
    project_isolation_set(
        project=vision,
        actor=ada,
        subnet_ids=["subnet-0a1b2c3d4e5f67890", "subnet-1b2c3d4e5f678901a"],
        security_group_ids=["sg-0123456789abcdef0"],
        kms_key_id="arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab",
    )
    place_order(bob, count=3)
    budget_set(project=vision, actor=fin, monthly_amount="40")
    usage_meter(now=timezone.now() + timedelta(minutes=30))
    rollups_refresh()
    token_issue(user=alice, name="laptop")
    pool = services.pool_create(
        user=alice,
        project=vision,
        name="notebooks",
        instance_type=host.instance_type,
        image=host.image,
        ssh_public_key=ED25519,
        max_size=2,
        desired=1,
    )
    services.schedule_create(
        pool=pool, user=alice, cron="0 9 * * 1-5", timezone="Europe/Berlin", desired=2
    )
    # The chart's samples, as autoscaler passes would have left them (no pass runs here: its
    # hosts would change the quota bars the tests below count).
    now = timezone.now()
    PoolSample.objects.bulk_create(
        PoolSample(pool=pool, at=now - timedelta(minutes=10 * n), desired=1, running_on_demand=1)
        for n in range(12)
    )
    # A job whose run is handed out and has written to its log.
    job = job_submit(
        requester=alice,
        project=vision,
        instance_type=host.instance_type,
        image=host.image,
        market="on_demand",
        name="resnet",
        command="python train.py",
    )
    job_host = services.instance_provision(instance_id=job.order.instances.get().pk)
    handed = job_assignment(host=job_host)
    ref = {"host": job_host, "job_id": job.pk, "number": handed.run.number}
    job_run_started(**ref, pid=1)
    job_log_append(**ref, offset=0, data=b"\x1b[32mepoch 1\x1b[0m - loss 0.9\n")
    # It succeeds and its host ends: the quota bars the tests count hold the two hosts above.
    job_run_exited(**ref, exit_code=0)
    services.instance_cloud_action(instance_id=job_host.pk, action="terminate")
    # A webhook of vision-lab with one delivery that arrived and one the receiver refused.
    webhook, _ = webhook_create(
        actor=ada, project=vision, url="https://hooks.example.org/gpu", events=["host.failed"]
    )
    for status, answer in (("delivered", 204), ("failed", 503)):
        webhook_emit(project_id=vision.pk, event="host.failed", data={"host": {"id": "x"}})
        webhook.deliveries.filter(attempts=0).update(
            status=status, attempts=8, response_status=answer, next_attempt_at=None
        )
    return {
        "host": host,
        "instance_type": host.instance_type,
        "pool": pool,
        "job": job,
        "webhook": webhook,
    }


def pages_for(role: str, world) -> list[str]:
    host = world["host"]
    everyone = [
        "/dashboard/",
        "/catalog/",
        "/catalog/g5.xlarge/order/",
        "/hosts/",
        f"/hosts/{host.pk}/",
        f"/projects/{host.project.slug}/idle-policy/",
        "/projects/",
        f"/projects/{host.project.slug}/",
        "/account/tokens/",
        "/notices/",
        f"/quotas/{host.project.slug}/request/",
        "/activity/",
        "/costs/",
        "/budgets/",
        "/pools/",
        "/pools/new/",
        f"/pools/{world['pool'].pk}/",
        "/jobs/",
        "/jobs/new/",
        f"/jobs/{world['job'].pk}/",
        "/api/v1/docs/",
        # DRF's browsable pages: a list with filters, and an object with actions.
        "/api/v1/",
        "/api/v1/instances/",
        f"/api/v1/instances/{host.pk}/",
    ]
    if role == "researcher":
        return everyone
    return [
        *everyone,
        "/approvals/",
        "/quotas/",
        f"/projects/{host.project.slug}/approval-policy/",
        "/audit/",
        f"/audit/events/{AuditEvent.objects.order_by('seq').first().seq}/",
        "/costs/reconciliation/",
        "/webhooks/",
        f"/webhooks/{world['webhook'].pk}/",
        "/sso/",
        "/admin/",
        f"/admin/instances/instancetype/{world['instance_type'].pk}/change/",
        "/admin/portal/user/",
        # django-celery-beat's form had an inline script (now a static one of ours).
        "/admin/django_celery_beat/periodictask/add/",
    ]


def sign_in_on(page, username: str) -> None:
    page.goto("/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url("**/dashboard/**")


def settle(page, path: str) -> None:
    """Wait until what the page draws or fetches after loading has happened."""
    if path == "/api/v1/docs/":
        # The schema is generated on request: seconds on a loaded machine.
        expect(page.locator(".swagger-ui .opblock").first).to_be_visible(timeout=20_000)
    elif path == "/costs/":
        expect(page.locator("#spend-chart")).to_have_attribute("data-ready", "true")
    elif path.startswith("/hosts/") and path != "/hosts/":
        # One poll of the live panel: a swapped-in fragment must pass the policy too.
        with page.expect_response(lambda response: "/panel/" in response.url):
            pass
    elif path.startswith("/pools/") and path not in ("/pools/", "/pools/new/"):
        expect(page.locator("#pool-chart")).to_have_attribute("data-ready", "true")
        with page.expect_response(lambda response: "/panel/" in response.url):
            pass
    elif path == "/hosts/":
        with page.expect_response(lambda response: "/hosts/rows/" in response.url):
            pass
    page.wait_for_load_state("networkidle")


def page_routes() -> set[str]:
    """Names of the routes a browser opens as a page (GET, not under /api/ or /admin/)."""

    def walk(patterns, prefix=""):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif pattern.name:
                yield prefix + str(pattern.pattern), pattern.name

    return {
        name
        for route, name in walk(get_resolver().url_patterns)
        if not route.startswith(("api/", "admin/"))
        and name not in NOT_HERE
        and "GET" in PAGE_METHODS.get(name, ["GET"])
    }


def test_bars_are_drawn_from_their_data(page, sign_in, world):
    """Widths left the style attribute for data-width; the script sizes them, on the page and
    in what htmx swaps in."""
    sign_in("alice")
    page.goto("/dashboard/")
    fill = page.locator('[data-quota="GPUs"] .fill')
    # Two g5.xlarge hosts, one GPU each, of 8.
    expect(fill).to_have_attribute("data-width", "25")
    assert fill.evaluate("element => element.style.width") == "25%"
    assert fill.evaluate("element => element.getBoundingClientRect().width") > 0
    page.goto("/budgets/")
    spent = page.locator('[data-project="vision-lab"] .bt-spent').first
    assert spent.evaluate("element => element.style.width") == (
        spent.get_attribute("data-width") + "%"
    )


def test_revoking_a_token_asks_first(page, sign_in, alice, world):
    sign_in("alice")
    page.goto("/account/tokens/")
    row = page.locator("tr[data-token]").first
    row.get_by_role("button", name="Revoke").click()
    answer_confirmation(page, accept=False, says="Revoke laptop?")
    expect(row).to_contain_text("active")
    assert not ApiToken.objects.filter(revoked_at__isnull=False).exists()

    row.get_by_role("button", name="Revoke").click()
    answer_confirmation(page)
    expect(page.locator(".flash")).to_contain_text("Revoked")
    expect(page.locator("tr[data-token]").first).to_contain_text("revoked")
    assert ApiToken.objects.filter(user=alice, revoked_at__isnull=False).count() == 1


def test_a_violation_is_caught(page, sign_in, browser_log, world):
    """The hook this suite relies on: a style attribute and a script added to a page are
    refused, and the log sees both."""
    sign_in("alice")
    page.goto("/dashboard/")
    page.evaluate(
        """() => {
          document.body.insertAdjacentHTML("beforeend", '<b style="color: red">x</b>');
          const script = document.createElement("script");
          script.textContent = "window.ranInline = true";
          document.body.append(script);
        }"""
    )
    for _ in range(50):
        if len(browser_log.violations) >= 2:
            break
        page.wait_for_timeout(100)
    seen = "\n".join(browser_log.violations)
    assert "style-src" in seen and "script-src" in seen, seen
    assert page.evaluate("() => window.ranInline") is None
    browser_log.clear()  # expected here; in any other test a violation fails at teardown


def test_the_periodic_task_form_says_the_crontab_in_words(page, sign_in, ada):
    """django-celery-beat's inline script is replaced by a static one that does its job."""
    from django_celery_beat.models import CrontabSchedule

    crontab = CrontabSchedule.objects.create(minute="30", hour="4")
    sign_in("ada")
    page.goto("/admin/django_celery_beat/periodictask/add/")
    expect(page.locator(".field-crontab_translation")).to_be_hidden()
    page.select_option("#id_crontab", str(crontab.pk))
    expect(page.locator(".field-crontab .help")).to_contain_text(
        f"In words: {crontab.human_readable}"
    )
