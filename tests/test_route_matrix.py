"""Every route and action, as every persona, on alice's objects: the answer each one gets.

The routes come from the URL resolver, so a route added tomorrow fails this test until its row
is added to EXPECTED. Objects a caller may not see answer 404; actions a caller may not take
answer 403; pages send anonymous visitors to the login page (302), the API answers them 401.

alice owns the objects; bob shares vision-lab with her; carol is in nlp-lab; ada is admin; fin
is finance.
"""

from __future__ import annotations

import json

import pytest
from django.db import transaction
from django.test import Client
from django.urls import URLResolver, get_resolver, reverse

from audit.models import AuditEvent
from instances import services
from instances.models import Image
from instances.services import approval_policy_set, idle_policy_set, quota_request_open, quota_set
from instances.services.jobs import job_submit
from portal.services import notice_send, token_issue, webhook_create, webhook_emit
from tests.conftest import ED25519, PASSWORD

PERSONAS = ("alice", "bob", "carol", "ada", "fin", "anonymous")

# (route name, method): answers for alice, bob, carol, ada, fin, anonymous.
EXPECTED: dict[tuple[str, str], tuple[int, ...]] = {
    # --- pages ---
    ("home", "GET"): (302, 302, 302, 302, 302, 302),
    ("dashboard", "GET"): (200, 200, 200, 200, 200, 302),
    ("approvals", "GET"): (403, 403, 403, 200, 403, 302),
    ("approval-decide", "POST"): (403, 403, 404, 302, 403, 302),
    ("quotas", "GET"): (403, 403, 403, 200, 403, 302),
    ("quota-save", "POST"): (403, 403, 403, 302, 403, 302),
    ("policy-save", "POST"): (403, 403, 404, 302, 403, 302),
    # Members of vision-lab (and admins) ask for more of its quota; only admins answer.
    ("quota-request", "GET"): (200, 200, 404, 200, 403, 302),
    ("quota-request", "POST"): (302, 302, 404, 302, 403, 302),
    ("quota-request-answer", "POST"): (403, 403, 403, 302, 403, 302),
    ("tokens", "GET"): (200, 200, 200, 200, 200, 302),
    # Everyone reads their own notices; alice's notice is only hers to dismiss.
    ("notices", "GET"): (200, 200, 200, 200, 200, 302),
    ("notice-dismiss", "POST"): (302, 404, 404, 404, 404, 302),
    ("tokens", "POST"): (302, 302, 302, 302, 302, 302),
    ("catalog", "GET"): (200, 200, 200, 200, 200, 302),
    ("order", "GET"): (200, 200, 200, 200, 403, 302),
    ("order", "POST"): (400, 400, 400, 400, 403, 302),
    ("order-estimate-panel", "GET"): (200, 200, 200, 200, 200, 302),
    ("hosts", "GET"): (200, 200, 200, 200, 200, 302),
    ("host-rows", "GET"): (200, 200, 200, 200, 200, 302),
    ("host", "GET"): (200, 200, 404, 200, 200, 302),
    ("host-panel", "GET"): (200, 200, 404, 200, 200, 302),
    ("host-action", "POST"): (302, 403, 404, 302, 403, 302),
    # My hosts' bulk stop/terminate of alice's host: one host not yours refuses the batch.
    ("hosts-bulk", "POST"): (302, 403, 404, 302, 403, 302),
    ("host-extend", "POST"): (302, 403, 404, 302, 403, 302),
    ("held-order-cancel", "POST"): (302, 403, 404, 302, 403, 302),
    ("host-keep-running", "POST"): (302, 403, 404, 302, 403, 302),
    ("idle-policy", "GET"): (200, 200, 404, 200, 200, 302),
    ("idle-policy", "POST"): (403, 403, 404, 302, 403, 302),
    ("approval-policy", "GET"): (403, 403, 404, 200, 403, 302),
    ("approval-policy", "POST"): (403, 403, 404, 302, 403, 302),
    ("audit-events", "GET"): (403, 403, 403, 200, 403, 302),
    ("audit-event", "GET"): (404, 404, 404, 200, 404, 302),
    ("audit-export-csv", "GET"): (403, 403, 403, 200, 403, 302),
    ("audit-export-jsonl", "GET"): (403, 403, 403, 200, 403, 302),
    ("my-activity", "GET"): (200, 200, 200, 200, 200, 302),
    # The schema and its docs are public (docs/api.md, Signing in): what they describe is not.
    ("api-docs", "GET"): (200, 200, 200, 200, 200, 200),
    ("costs", "GET"): (200, 200, 200, 200, 200, 302),
    ("costs-csv", "GET"): (200, 200, 200, 200, 200, 302),
    ("budgets", "GET"): (200, 200, 200, 200, 200, 302),
    ("budgets", "POST"): (403, 403, 403, 302, 302, 302),
    ("reconciliation", "GET"): (403, 403, 403, 200, 200, 302),
    ("reconciliation", "POST"): (403, 403, 403, 400, 400, 302),
    # No bill has been imported in this world: nothing to export yet (tests/billing has the 200).
    ("reconciliation-csv", "GET"): (403, 403, 403, 404, 404, 302),
    # Job pages: members of the job's project read it; its owner, managers and admins act.
    # Re-running a job that has not ended is refused with a message on its page (302).
    ("jobs", "GET"): (200, 200, 200, 200, 200, 302),
    ("job-new", "GET"): (200, 200, 200, 200, 403, 302),
    ("job-new", "POST"): (400, 400, 400, 400, 403, 302),
    ("job", "GET"): (200, 200, 404, 200, 200, 302),
    ("job-panel", "GET"): (200, 200, 404, 200, 200, 302),
    ("job-log", "GET"): (200, 200, 404, 200, 200, 302),
    ("job-log-file", "GET"): (200, 200, 404, 200, 200, 302),
    ("job-metrics", "GET"): (200, 200, 404, 200, 200, 302),
    ("job-tensorboard", "GET"): (200, 200, 404, 200, 200, 302),
    ("job-tensorboard-data", "GET"): (200, 200, 404, 200, 200, 302),
    ("tensorboard-font", "GET"): (200, 200, 200, 200, 200, 302),
    ("job-page-cancel", "POST"): (302, 403, 404, 302, 403, 302),
    ("job-page-rerun", "POST"): (302, 403, 404, 302, 403, 302),
    # Pool pages: members of the pool's project read it; its creator, managers, admins change it.
    ("pools", "GET"): (200, 200, 200, 200, 200, 302),
    ("pool-new", "GET"): (200, 200, 200, 200, 403, 302),
    ("pool-new", "POST"): (400, 400, 400, 400, 403, 302),
    ("pool-preview", "GET"): (200, 200, 200, 200, 200, 302),
    ("pool", "GET"): (200, 200, 404, 200, 200, 302),
    ("pool-panel", "GET"): (200, 200, 404, 200, 200, 302),
    ("pool-chart", "GET"): (200, 200, 404, 200, 200, 302),
    ("pool-desired", "POST"): (302, 403, 404, 302, 403, 302),
    ("pool-edit", "POST"): (302, 403, 404, 302, 403, 302),
    ("pool-delete", "POST"): (302, 403, 404, 302, 403, 302),
    ("pool-schedule-add", "POST"): (302, 403, 404, 302, 403, 302),
    ("pool-schedule-edit", "POST"): (302, 403, 404, 302, 403, 302),
    ("pool-schedule-delete", "POST"): (302, 403, 404, 302, 403, 302),
    # Webhooks: ada's webhook of vision-lab (host and order events). Its managers and admins
    # register and manage them (finance: budget-only ones); members who manage nothing have
    # no webhooks page. An empty form answers 400; a resend goes back to the page.
    # Single sign-on's rules are the admins'; an empty rule answers 400 on the form.
    # A host's notebook: its owner, the project's managers and admins open and stop it (none
    # is offered in this world: the simulated hosts run no programs here, a 409 said on the
    # host's page); the proxy answers 404 to everyone while no notebook runs, and always to
    # those who may not act on the host (tests/instances/test_notebooks.py, with one running).
    ("host-notebook", "POST"): (302, 403, 404, 302, 403, 302),
    ("host-notebook-stop", "POST"): (302, 403, 404, 302, 403, 302),
    ("notebook", "GET"): (404, 404, 404, 404, 404, 302),
    ("notebook-path", "GET"): (404, 404, 404, 404, 404, 302),
    # Projects: members read their project's page; only admins change where its hosts run.
    ("projects", "GET"): (200, 200, 200, 200, 200, 302),
    ("project", "GET"): (200, 200, 404, 200, 200, 302),
    ("project", "POST"): (403, 403, 404, 302, 403, 302),
    ("sso", "GET"): (403, 403, 403, 200, 403, 302),
    ("sso", "POST"): (403, 403, 403, 400, 403, 302),
    ("webhooks", "GET"): (404, 404, 404, 200, 200, 302),
    ("webhooks", "POST"): (404, 404, 404, 400, 400, 302),
    ("webhook", "GET"): (404, 404, 404, 200, 404, 302),
    ("webhook", "POST"): (404, 404, 404, 302, 404, 302),
    # --- API ---
    ("api-root", "GET"): (200, 200, 200, 200, 200, 401),
    ("api-schema", "GET"): (200, 200, 200, 200, 200, 200),
    ("instance-type-list", "GET"): (200, 200, 200, 200, 200, 401),
    ("instance-type-detail", "GET"): (200, 200, 200, 200, 200, 401),
    ("image-list", "GET"): (200, 200, 200, 200, 200, 401),
    ("mig-profile-list", "GET"): (200, 200, 200, 200, 200, 401),
    ("image-detail", "GET"): (200, 200, 200, 200, 200, 401),
    ("project-list", "GET"): (200, 200, 200, 200, 200, 401),
    ("project-detail", "GET"): (200, 200, 404, 200, 200, 401),
    ("project-detail", "PATCH"): (403, 403, 404, 200, 403, 401),
    ("project-history", "GET"): (200, 200, 404, 200, 200, 401),
    ("audit-event-list", "GET"): (403, 403, 403, 200, 403, 401),
    ("audit-event-detail", "GET"): (403, 403, 403, 200, 403, 401),
    ("order-list", "GET"): (200, 200, 200, 200, 200, 401),
    ("order-list", "POST"): (201, 201, 400, 201, 403, 401),
    ("order-estimate", "GET"): (200, 200, 200, 200, 200, 401),
    ("order-detail", "GET"): (200, 200, 404, 200, 200, 401),
    ("order-approve", "POST"): (403, 403, 404, 200, 403, 401),
    ("order-reject", "POST"): (403, 403, 404, 200, 403, 401),
    ("order-cancel", "POST"): (200, 403, 404, 200, 403, 401),
    ("instance-list", "GET"): (200, 200, 200, 200, 200, 401),
    ("instance-detail", "GET"): (200, 200, 404, 200, 200, 401),
    ("instance-start", "POST"): (409, 403, 404, 409, 403, 401),
    ("instance-stop", "POST"): (202, 403, 404, 202, 403, 401),
    ("instance-terminate", "POST"): (202, 403, 404, 202, 403, 401),
    # The API's bulk action on alice's host: one host not yours refuses the batch (403).
    ("instance-bulk", "POST"): (202, 403, 404, 202, 403, 401),
    ("instance-extend", "POST"): (200, 403, 404, 200, 403, 401),
    ("instance-keep-running", "POST"): (200, 403, 404, 200, 403, 401),
    # The host's notebook (none offered in this world: 409 notebooks_not_offered to open one).
    ("instance-notebook", "GET"): (200, 403, 404, 200, 403, 401),
    ("instance-notebook", "POST"): (409, 403, 404, 409, 403, 401),
    ("instance-notebook", "DELETE"): (204, 403, 404, 204, 403, 401),
    # People read a host's series; only the host's own agent posts (tests/instances/
    # test_telemetry.py: the agent's 201, another host's 403).
    ("instance-metrics", "GET"): (200, 200, 404, 200, 200, 401),
    ("instance-metrics", "POST"): (403, 403, 403, 403, 403, 401),
    # Jobs: carol may not submit to vision-lab (400, the project field), finance reads only.
    ("job-list", "GET"): (200, 200, 200, 200, 200, 401),
    ("job-list", "POST"): (201, 201, 400, 201, 403, 401),
    ("job-detail", "GET"): (200, 200, 404, 200, 200, 401),
    ("job-logs", "GET"): (200, 200, 404, 200, 200, 401),
    ("job-scalars", "GET"): (200, 200, 404, 200, 200, 401),
    ("job-cancel", "POST"): (200, 403, 404, 200, 403, 401),
    ("job-rerun", "POST"): (409, 403, 404, 409, 403, 401),
    # The agent's side takes a host's agent credential and nothing else (tests/instances/
    # test_jobs.py: the agent's answers, another host's 403).
    ("host-job", "GET"): (401, 401, 401, 401, 401, 401),
    ("host-job-started", "POST"): (401, 401, 401, 401, 401, 401),
    ("host-job-log", "POST"): (401, 401, 401, 401, 401, 401),
    ("host-job-exit", "POST"): (401, 401, 401, 401, 401, 401),
    ("host-job-scalars", "POST"): (401, 401, 401, 401, 401, 401),
    ("host-notebook-agent", "GET"): (401, 401, 401, 401, 401, 401),
    ("project-idle-policy", "GET"): (200, 200, 404, 200, 200, 401),
    ("project-idle-policy", "PUT"): (403, 403, 404, 200, 403, 401),
    ("project-approval-policy", "GET"): (200, 200, 404, 200, 200, 401),
    ("project-approval-policy", "PUT"): (403, 403, 404, 200, 403, 401),
    ("quota-list", "GET"): (200, 200, 200, 200, 200, 401),
    ("quota-list", "POST"): (403, 403, 403, 201, 403, 401),
    ("quota-detail", "GET"): (200, 200, 404, 200, 200, 401),
    ("quota-detail", "PUT"): (403, 403, 404, 200, 403, 401),
    ("quota-detail", "PATCH"): (403, 403, 404, 200, 403, 401),
    ("quota-detail", "DELETE"): (403, 403, 404, 204, 403, 401),
    ("quota-request-list", "GET"): (200, 200, 200, 200, 200, 401),
    ("quota-request-list", "POST"): (201, 201, 400, 201, 403, 401),
    ("quota-request-detail", "GET"): (200, 404, 404, 200, 404, 401),
    ("quota-request-decide", "POST"): (403, 404, 404, 200, 404, 401),
    ("cost-list", "GET"): (200, 200, 200, 200, 200, 401),
    ("budget-list", "GET"): (200, 200, 200, 200, 200, 401),
    ("budget-detail", "GET"): (200, 200, 404, 200, 200, 401),
    ("budget-detail", "PUT"): (403, 403, 404, 200, 200, 401),
    ("token-list", "GET"): (200, 200, 200, 200, 200, 401),
    ("token-list", "POST"): (201, 201, 201, 201, 201, 201),
    # Admins see and revoke anyone's tokens (an SSO account's scripts among them).
    ("token-detail", "DELETE"): (204, 404, 404, 204, 404, 401),
    # alice's pool in vision-lab: members read it, its creator, managers and admins change it.
    ("pool-list", "GET"): (200, 200, 200, 200, 200, 401),
    ("pool-list", "POST"): (201, 201, 400, 201, 403, 401),
    ("pool-detail", "GET"): (200, 200, 404, 200, 200, 401),
    ("pool-detail", "PATCH"): (200, 403, 404, 200, 403, 401),
    ("pool-detail", "DELETE"): (202, 403, 404, 202, 403, 401),
    ("pool-events", "GET"): (200, 200, 404, 200, 200, 401),
    ("pool-schedules", "GET"): (200, 200, 404, 200, 200, 401),
    ("pool-schedules", "POST"): (201, 403, 404, 201, 403, 401),
    ("pool-schedule-detail", "GET"): (200, 200, 404, 200, 200, 401),
    ("pool-schedule-detail", "PATCH"): (200, 403, 404, 200, 403, 401),
    ("pool-schedule-detail", "DELETE"): (204, 403, 404, 204, 403, 401),
    # alice and bob are members, not managers (403); carol may not name vision-lab (400);
    # finance may register only budget events (403 forbidden_event).
    ("webhook-list", "GET"): (200, 200, 200, 200, 200, 401),
    ("webhook-list", "POST"): (403, 403, 400, 201, 403, 401),
    ("webhook-detail", "GET"): (404, 404, 404, 200, 404, 401),
    ("webhook-detail", "PATCH"): (404, 404, 404, 200, 404, 401),
    ("webhook-detail", "DELETE"): (404, 404, 404, 204, 404, 401),
    ("webhook-rotate-secret", "POST"): (404, 404, 404, 200, 404, 401),
    ("webhook-deliveries", "GET"): (404, 404, 404, 200, 404, 401),
    ("webhook-delivery-resend", "POST"): (404, 404, 404, 202, 404, 401),
}

# Who may act is answered before what the object allows. Each row: (route name[:verb], which of
# alice's objects, in a state that refuses the action, POST body, headers) and
# the answers for alice, bob, carol, ada, fin, anonymous. bob and fin must hear 403, never the
# 409 that describes the object; carol 404; only those who may act learn the state.
HTMX = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "host-panel"}
AUTHORIZATION_BEFORE_STATE: list[tuple[tuple, tuple[int, ...]]] = [
    # alice's running spot host: spot hosts cannot be stopped; a running host cannot start.
    (("instance-stop", "spot", {}, {}), (409, 403, 404, 409, 403, 401)),
    (("instance-start", "spot", {}, {}), (409, 403, 404, 409, 403, 401)),
    (("instance-terminate", "spot", {}, {}), (202, 403, 404, 202, 403, 401)),
    (("host-action:stop", "spot", {}, HTMX), (409, 403, 404, 409, 403, 302)),
    (("host-action:start", "spot", {}, HTMX), (409, 403, 404, 409, 403, 302)),
    (("host-action:terminate", "spot", {}, HTMX), (200, 403, 404, 200, 403, 302)),
    # The plain form shows the refusal as a message on the page it returns to (302).
    (("host-action:stop", "spot", {}, {}), (302, 403, 404, 302, 403, 302)),
    # alice's order that was placed without approval: already decided.
    (("order-approve", "placed", {}, {}), (403, 403, 404, 409, 403, 401)),
    (("order-reject", "placed", {"reason": "no"}, {}), (403, 403, 404, 409, 403, 401)),
    # A body only a decider may hear about.
    (("order-reject", "pending", {"reason": ""}, {}), (403, 403, 404, 400, 403, 401)),
    (("order-approve", "pending", {"owner": "fin"}, {}), (403, 403, 404, 400, 403, 401)),
    (("approval-decide:approve", "placed", {}, {}), (403, 403, 404, 302, 403, 302)),
    # A decided order cannot be cancelled; a lease past the longest, or no hours, is refused.
    (("order-cancel", "placed", {}, {}), (409, 403, 404, 409, 403, 401)),
    (("held-order-cancel", "placed", {}, {}), (302, 403, 404, 302, 403, 302)),
    (("instance-extend", "host", {"hours": 1000}, {}), (409, 403, 404, 409, 403, 401)),
    (("instance-extend", "host", {"hours": 0}, {}), (400, 403, 404, 400, 403, 401)),
    (("host-extend", "host", {"hours": 1000}, {}), (302, 403, 404, 302, 403, 302)),
    (("host-extend", "host", {"hours": 1000}, HTMX), (409, 403, 404, 409, 403, 302)),
]

# Every answer, whatever its status, carries these (portal/middleware.py, settings).
SECURITY_HEADERS = ("Content-Security-Policy", "Permissions-Policy")

# Routes this test leaves to others, and why.
NOT_HERE = {
    "login": "public by design; tests/portal/test_login.py",
    "logout": "ends the caller's own session; tests/portal/test_login.py",
    "health": "public by design; tests/portal/test_health.py",
    "metrics": "a scraper's bearer token, no persona's session; tests/ops/test_metrics.py",
    "oidc-login": "starts single sign-on, for anyone not signed in; tests/portal/test_sso.py",
    "oidc-callback": "the provider's way back, for anyone; tests/portal/test_sso.py",
}
# Methods of plain Django views (DRF views list their own).
PAGE_METHODS = {
    "approval-decide": ["POST"],
    "quota-save": ["POST"],
    "policy-save": ["POST"],
    "quota-request": ["GET", "POST"],
    "quota-request-answer": ["POST"],
    "notice-dismiss": ["POST"],
    "host-action": ["POST"],
    "hosts-bulk": ["POST"],
    "host-extend": ["POST"],
    "held-order-cancel": ["POST"],
    "host-keep-running": ["POST"],
    "idle-policy": ["GET", "POST"],
    "approval-policy": ["GET", "POST"],
    "order": ["GET", "POST"],
    "tokens": ["GET", "POST"],
    "budgets": ["GET", "POST"],
    "reconciliation": ["GET", "POST"],
    "job-new": ["GET", "POST"],
    "job-page-cancel": ["POST"],
    "job-page-rerun": ["POST"],
    "pool-new": ["GET", "POST"],
    "pool-desired": ["POST"],
    "pool-edit": ["POST"],
    "pool-delete": ["POST"],
    "pool-schedule-add": ["POST"],
    "pool-schedule-edit": ["POST"],
    "pool-schedule-delete": ["POST"],
    "webhooks": ["GET", "POST"],
    "sso": ["GET", "POST"],
    "webhook": ["GET", "POST"],
    "project": ["GET", "POST"],
    "host-notebook": ["POST"],
    "host-notebook-stop": ["POST"],
}


def _routes():
    """(name, method) for every named route outside the Django admin."""
    found = set()

    def walk(patterns, prefix=""):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                if str(pattern.pattern).startswith("admin/"):
                    continue  # the Django admin: admins only, by Django itself
                yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif pattern.name and "format" not in str(pattern.pattern):
                yield pattern

    for pattern in walk(get_resolver().url_patterns):
        callback = pattern.callback
        if pattern.name in NOT_HERE:
            continue
        if getattr(callback, "actions", None):
            methods = [method.upper() for method in callback.actions]
        elif getattr(callback, "cls", None):
            methods = [
                m.upper()
                for m in ("get", "post", "put", "patch", "delete")
                if hasattr(callback.cls, m)
            ]
        else:
            methods = PAGE_METHODS.get(pattern.name, ["GET"])
        found.update((pattern.name, method) for method in methods)
    return sorted(found)


ROUTES = _routes()


def test_every_route_is_in_the_table():
    missing = sorted(set(ROUTES) - set(EXPECTED))
    stale = sorted(set(EXPECTED) - set(ROUTES))
    assert not missing, f"add these routes to EXPECTED with the answer each persona gets: {missing}"
    assert not stale, f"these rows name routes that no longer exist: {stale}"


@pytest.fixture
def world(catalog, alice, bob, carol, ada, fin, projects, running_host, place_order):
    vision = projects["vision-lab"]
    host = running_host()
    spot = running_host(market="spot")
    approval_policy_set(project=vision, actor=ada, gpus_above=2)
    idle_policy_set(project=vision, actor=ada, enabled=True)
    pending = place_order(alice, count=3)
    quota = quota_set(project=vision, actor=ada, max_gpus=100)
    token, _ = token_issue(user=alice, name="laptop")
    ask = quota_request_open(requester=alice, project=vision, gpus=4, reason="a bigger sweep")
    notice = notice_send(user=alice, subject="for alice only")
    pool = services.pool_create(
        user=alice,
        project=vision,
        name="matrix",
        instance_type=catalog["g5.xlarge"],
        image=Image.objects.get(name="tf-2.17-cuda12.3"),
        ssh_public_key=ED25519,
        desired=1,
        max_size=2,
    )
    schedule = services.schedule_create(pool=pool, user=alice, cron="0 21 * * *", desired=0)
    webhook, _ = webhook_create(
        actor=ada,
        project=vision,
        url="https://hooks.example.org/gpu",
        events=["order.placed", "host.running"],
    )
    webhook_emit(project_id=vision.pk, event="order.placed", data={"matrix": True})
    job = job_submit(
        requester=alice,
        project=vision,
        instance_type=catalog["g5.xlarge"],
        image=Image.objects.get(name="tf-2.17-cuda12.3"),
        market="spot",
        name="matrix-job",
        command="python train.py",
    )
    ada_row = AuditEvent.objects.order_by("seq").first()
    return {
        "users": {"alice": alice, "bob": bob, "carol": carol, "ada": ada, "fin": fin},
        "host": host,
        "spot": spot,
        "placed": host.order,
        "pending": pending,
        "quota": quota,
        "token": token,
        "ask": ask,
        "notice": notice,
        "event": ada_row,
        "pool": pool,
        "schedule": schedule,
        "job": job,
        "webhook": webhook,
        "delivery": webhook.deliveries.first(),
    }


def _request(world, name: str, method: str) -> tuple[str, dict]:
    """The path and body to send for one route and method, on alice's objects."""
    host, pending, placed = world["host"], world["pending"], world["placed"]
    kwargs = {
        "approval-decide": {"pk": pending.pk, "decision": "approve"},
        "quota-save": {"slug": "vision-lab"},
        "quota-request": {"slug": "vision-lab"},
        "notice-dismiss": {"pk": world["notice"].pk},
        "quota-request-answer": {"pk": world["ask"].pk, "decision": "grant"},
        "quota-request-detail": {"pk": world["ask"].pk},
        "quota-request-decide": {"pk": world["ask"].pk},
        "policy-save": {"slug": "vision-lab"},
        "order": {"name": "g5.xlarge"},
        "order-estimate-panel": {"name": "g5.xlarge"},
        "host": {"pk": host.pk},
        "host-panel": {"pk": host.pk},
        "host-action": {"pk": host.pk, "verb": "terminate"},
        "host-extend": {"pk": host.pk},
        "held-order-cancel": {"pk": pending.pk},
        "order-cancel": {"pk": pending.pk},
        "instance-extend": {"pk": host.pk},
        "host-keep-running": {"pk": host.pk},
        "host-notebook": {"pk": host.pk},
        "host-notebook-stop": {"pk": host.pk},
        "notebook": {"pk": host.pk},
        "notebook-path": {"pk": host.pk, "rest": "lab"},
        "idle-policy": {"slug": "vision-lab"},
        "instance-keep-running": {"pk": host.pk},
        "instance-notebook": {"pk": host.pk},
        "instance-metrics": {"pk": host.pk},
        "project-idle-policy": {"slug": "vision-lab"},
        "approval-policy": {"slug": "vision-lab"},
        "project-approval-policy": {"slug": "vision-lab"},
        "audit-event": {"seq": world["event"].seq},
        "audit-event-detail": {"seq": world["event"].seq},
        "instance-type-detail": {"name": "g5.xlarge"},
        "image-detail": {"name": "tf-2.17-cuda12.3"},
        "project-detail": {"slug": "vision-lab"},
        "project": {"slug": "vision-lab"},
        "project-history": {"slug": "vision-lab"},
        "order-detail": {"pk": placed.pk},
        "order-approve": {"pk": pending.pk},
        "order-reject": {"pk": pending.pk},
        "instance-detail": {"pk": host.pk},
        "instance-start": {"pk": host.pk},
        "instance-stop": {"pk": host.pk},
        "instance-terminate": {"pk": host.pk},
        "quota-detail": {"pk": world["quota"].pk},
        "token-detail": {"pk": world["token"].pk},
        "budget-detail": {"slug": "vision-lab"},
        **{
            route: {"pk": world["pool"].pk}
            for route in (
                "pool",
                "pool-panel",
                "pool-chart",
                "pool-desired",
                "pool-edit",
                "pool-delete",
                "pool-schedule-add",
            )
        },
        **{
            route: {"pk": world["pool"].pk, "sid": world["schedule"].pk}
            for route in ("pool-schedule-edit", "pool-schedule-delete")
        },
        **{
            route: {"pk": world["job"].pk}
            for route in (
                "job",
                "job-panel",
                "job-log",
                "job-log-file",
                "job-metrics",
                "job-tensorboard",
                "job-scalars",
                "job-cancel",
                "job-rerun",
                "job-page-cancel",
                "job-page-rerun",
                "job-detail",
                "job-logs",
            )
        },
        **{
            route: {"pk": host.pk}
            for route in (
                "host-job",
                "host-job-started",
                "host-job-log",
                "host-job-exit",
                "host-job-scalars",
                "host-notebook-agent",
            )
        },
        "job-tensorboard-data": {"pk": world["job"].pk, "rest": "data/runs"},
        "tensorboard-font": {"name": "oMMgfZMQthOryQo9n22dcuvvDin1pK8aKteLpeZ5c0A.woff2"},
        **{
            route: {"pk": world["webhook"].pk}
            for route in (
                "webhook",
                "webhook-detail",
                "webhook-rotate-secret",
                "webhook-deliveries",
            )
        },
        "webhook-delivery-resend": {"pk": world["webhook"].pk, "delivery": world["delivery"].pk},
        "pool-detail": {"pk": world["pool"].pk},
        "pool-events": {"pk": world["pool"].pk},
        "pool-schedules": {"pk": world["pool"].pk},
        "pool-schedule-detail": {"pk": world["pool"].pk, "sid": world["schedule"].pk},
    }.get(name, {})
    path = reverse(name, kwargs=kwargs)
    query = {"order-estimate": "?instance_type=g5.xlarge"}.get(name, "")
    bodies = {
        ("order-list", "POST"): {
            "project": "vision-lab",
            "instance_type": "g5.xlarge",
            "image": "tf-2.17-cuda12.3",
            "market": "on_demand",
            "count": 1,
            "ssh_public_key": ED25519,
        },
        ("order-reject", "POST"): {"reason": "not this month"},
        ("job-list", "POST"): {
            "project": "vision-lab",
            "name": "matrix-2",
            "instance_type": "g5.xlarge",
            "image": "tf-2.17-cuda12.3",
            "market": "spot",
            "command": "python train.py",
        },
        ("pool-list", "POST"): {
            "project": "vision-lab",
            "name": "matrix-2",
            "instance_type": "g5.xlarge",
            "image": "tf-2.17-cuda12.3",
            "ssh_public_key": ED25519,
            "desired": 1,
            "max_size": 2,
        },
        ("pool-detail", "PATCH"): {"desired": 2},
        ("webhook-list", "POST"): {
            "project": "vision-lab",
            "url": "https://hooks.example.org/matrix",
            "events": ["order.placed"],
        },
        ("webhook-detail", "PATCH"): {"description": "matrix"},
        ("webhook", "POST"): {"resend": str(world["delivery"].pk)},
        ("pool-schedules", "POST"): {"cron": "0 9 * * 1-5", "timezone": "Asia/Shanghai"}
        | {"desired": 2},
        ("pool-schedule-detail", "PATCH"): {"desired": 1},
        ("instance-extend", "POST"): {"hours": 2},
        ("host-extend", "POST"): {"hours": "2"},
        ("hosts-bulk", "POST"): {"host": str(host.pk), "action": "terminate"},
        ("instance-bulk", "POST"): {"instances": [str(host.pk)], "action": "terminate"},
        ("quota-list", "POST"): {"project": "nlp-lab", "max_gpus": 4},
        ("quota-detail", "PUT"): {"project": "vision-lab", "max_gpus": 50},
        ("quota-detail", "PATCH"): {"max_gpus": 60},
        ("quota-request", "POST"): {"gpus": "4", "reason": "a bigger sweep"},
        ("quota-request-list", "POST"): {"project": "vision-lab", "gpus": 4, "reason": "sweep"},
        ("quota-request-decide", "POST"): {"decision": "grant"},
        ("token-list", "POST"): {"username": "alice", "password": PASSWORD, "name": "m"},
        ("tokens", "POST"): {"name": "matrix"},
        ("budgets", "POST"): {"project": "vision-lab", "vision-lab-monthly_amount": "5000"},
        ("budget-detail", "PUT"): {"monthly_amount": "5000.00"},
        ("quota-save", "POST"): {"vision-lab-max_gpus": "50"},
        ("project-idle-policy", "PUT"): {"enabled": True, "idle_minutes": 30},
        ("project-approval-policy", "PUT"): {"gpus_above": 4},
        ("project-detail", "PATCH"): {"tenancy": "dedicated"},
        ("project", "POST"): {"tenancy": "dedicated"},
        ("approval-policy", "POST"): {"gpus_above": "4", "expire_after_days": "3"},
        ("idle-policy", "POST"): {
            "enabled": "on",
            "threshold_percent": "5",
            "idle_minutes": "60",
            "warning_minutes": "5",
            "snooze_hours": "4",
        },
        ("instance-metrics", "POST"): {
            "readings": [{"at": "2026-11-17T10:00:00Z", "utilization": 5, "memory_used_mib": 1}]
        },
        ("pool-desired", "POST"): {"desired": "2"},
        ("pool-edit", "POST"): {
            "min_size": "0",
            "desired": "1",
            "max_size": "2",
            "on_demand_base": "1",
            "spot_percent": "0",
            "interruption_policy": "notify",
        },
        ("pool-schedule-add", "POST"): {"cron": "0 21 * * *", "timezone": "UTC", "desired": "0"},
        ("pool-schedule-edit", "POST"): {"cron": "0 8 * * 1-5", "timezone": "UTC", "desired": "1"},
        ("policy-save", "POST"): {
            "policy-vision-lab-gpus_above": "4",
            "policy-vision-lab-expire_after_days": "3",
        },
    }
    return path + query, bodies.get((name, method), {})


def _clients(world) -> dict[str, Client]:
    clients = {"anonymous": Client()}
    for persona, user in world["users"].items():
        clients[persona] = Client()
        clients[persona].force_login(user)
    return clients


# A sweep (every route as every persona): in make test, not in make test-fast's inner loop.
@pytest.mark.sweep
def test_each_route_answers_each_persona_as_the_table_says(world):
    """One pass over every route: each call runs in a transaction that is rolled back, so each
    persona finds alice's objects as they were. Every mismatch is listed at once."""
    clients = _clients(world)
    mismatches = []
    for name, method in ROUTES:
        if (name, method) not in EXPECTED:
            continue  # reported by test_every_route_is_in_the_table
        path, body = _request(world, name, method)
        api = path.startswith("/api/")
        got = []
        for persona in PERSONAS:
            with transaction.atomic():
                if api and method != "GET":
                    response = getattr(clients[persona], method.lower())(
                        path, json.dumps(body), content_type="application/json"
                    )
                else:
                    response = getattr(clients[persona], method.lower())(path, body)
                got.append(response.status_code)
                missing = [h for h in SECURITY_HEADERS if h not in response]
                if missing:
                    mismatches.append(f"{method} {name} as {persona}: no {missing}")
                transaction.set_rollback(True)
        if tuple(got) != EXPECTED[(name, method)]:
            mismatches.append(
                f"{method} {name}: expected {EXPECTED[(name, method)]}, got {tuple(got)}"
            )
    assert not mismatches, "\n".join(mismatches)


def test_who_may_act_is_answered_before_what_the_object_allows(world):
    """bob (same project, not the owner) and fin (finance) stopping alice's spot host hear
    403, not "spot hosts cannot be stopped"; the same order of answers holds for every host
    action and order decision, page and API."""
    assert world["spot"].market == "spot"
    assert world["spot"].status == "running"
    clients = _clients(world)
    mismatches = []
    for (route, target, body, headers), expected in AUTHORIZATION_BEFORE_STATE:
        name, _, verb = route.partition(":")
        kwargs = {"pk": world[target].pk}
        if verb:
            kwargs["verb" if name == "host-action" else "decision"] = verb
        path = reverse(name, kwargs=kwargs)
        got = []
        for persona in PERSONAS:
            with transaction.atomic():
                client = clients[persona]
                if path.startswith("/api/"):
                    response = client.post(
                        path, json.dumps(body), content_type="application/json", **headers
                    )
                else:
                    response = client.post(path, body, **headers)
                got.append(response.status_code)
                if persona in ("bob", "fin") and response.status_code != 403:
                    mismatches.append(f"{persona} {route} on {target}: {response.content[:200]}")
                transaction.set_rollback(True)
        if tuple(got) != expected:
            mismatches.append(f"POST {route} on {target}: expected {expected}, got {tuple(got)}")
    assert not mismatches, "\n".join(mismatches)
