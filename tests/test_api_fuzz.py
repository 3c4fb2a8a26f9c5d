"""Property-based fuzz of the whole API: Schemathesis reads /api/v1/schema/ and drives every
operation in process (WSGI), as an admin (ada) and as a researcher (alice), over a small world
with real objects to hit (the catalog, both projects, a running host and its order, an order
waiting for approval, a budget, a quota, a token).

Each call is checked for what the schema promises: no 5xx, only documented status codes, bodies
that match their schema, schema-valid requests accepted and schema-invalid ones refused.

What the schema cannot say, the positive examples are given: a valid order names a project the
caller is in, a type and an image that fit each other and a real SSH key; filters and quotas
name things that exist; a report's end is not before its start. Negative examples are sent as
drawn. Every call runs in a transaction rolled back after it, so an unsafe call (a stop, a
delete, a revoked token) leaves the next example the same world.

The budget is fixed (``FUZZ_EXAMPLES`` per operation, derandomized) so the run takes about a
minute per persona; ``PORTAL_FUZZ_EXAMPLES`` raises it for a deeper run.
"""

from __future__ import annotations

import base64
import os
import zlib
from dataclasses import dataclass, field
from datetime import date, timedelta

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections, transaction
from django.utils import timezone
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    negative_data_rejection,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.conftest import ED25519, PASSWORD
from tests.instances.test_jobs import tar

pytestmark = [pytest.mark.django_db, pytest.mark.postgres, pytest.mark.fuzz]

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    response_schema_conformance,
    positive_data_acceptance,
    negative_data_rejection,
]
WORKDIR_TAR = base64.b64encode(tar({"train.py": b"print(1)\n"})).decode()
FUZZ_EXAMPLES = int(os.environ.get("PORTAL_FUZZ_EXAMPLES", "12"))
FUZZ = settings(
    max_examples=FUZZ_EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


@dataclass
class World:
    """The real objects a fuzzed call can name."""

    tokens: dict[str, str]
    projects: dict[str, list[str]]
    users: dict[str, list[str]]
    pairs: list[tuple[str, str]]
    spot_types: set[str]
    gpu_models: list[str]
    # Real values of the path parameter, by the operation's path prefix.
    path_values: dict[str, list[str]] = field(default_factory=dict)
    schedule_ids: list[str] = field(default_factory=list)
    delivery_ids: list[str] = field(default_factory=list)


@pytest.fixture
def world(running_host, place_order, alice, bob, carol, ada, fin, projects, catalog):
    from audit.models import AuditEvent
    from billing.services.budgets import budget_set
    from instances.models import Image, InstanceType
    from instances.services import approval_policy_set, quota_set
    from portal.models import ApiToken
    from portal.services import token_issue, webhook_create, webhook_emit

    host = running_host()
    approval_policy_set(project=projects["vision-lab"], actor=ada, gpus_above=4)
    waiting = place_order(alice, count=8)
    budget_set(project=projects["vision-lab"], actor=ada, monthly_amount="5000.00")
    quota = quota_set(project=projects["vision-lab"], actor=ada, max_gpus=32)
    tokens = {user.username: token_issue(user=user, name="fuzz")[1] for user in (ada, alice)}
    from instances import services

    pool = services.pool_create(
        user=alice,
        project=projects["vision-lab"],
        name="fuzz",
        instance_type=catalog["g5.xlarge"],
        image=Image.objects.get(name="tf-2.17-cuda12.3"),
        ssh_public_key=ED25519,
        desired=1,
        max_size=4,
    )
    schedule = services.schedule_create(pool=pool, user=alice, cron="0 21 * * *", desired=0)
    webhook, _ = webhook_create(
        actor=ada,
        project=projects["vision-lab"],
        url="https://hooks.example.org/fuzz",
        events=["order.placed", "host.failed"],
    )
    webhook_emit(project_id=projects["vision-lab"].pk, event="host.failed", data={"n": 1})
    token_ids = ApiToken.objects.values_list("pk", flat=True)
    offered = InstanceType.objects.offered()
    pairs = [
        (kind.name, image.name)
        for kind in offered.order_by("name")
        for image in Image.objects.filter(is_active=True).order_by("name")
        if image.supports(kind)
    ]
    return World(
        tokens=tokens,
        projects={"ada": ["vision-lab", "nlp-lab"], "alice": ["vision-lab"]},
        users={"ada": ["alice", "bob", "carol", "ada", "fin"], "alice": ["alice", "bob"]},
        pairs=pairs,
        spot_types=set(offered.filter(spot_offered=True).values_list("name", flat=True)),
        gpu_models=sorted(set(offered.values_list("gpu_model", flat=True))),
        schedule_ids=[str(schedule.pk)],
        delivery_ids=[str(pk) for pk in webhook.deliveries.values_list("pk", flat=True)],
        path_values={
            "/api/v1/pools/": [str(pool.pk)],
            "/api/v1/webhooks/": [str(webhook.pk)],
            "/api/v1/instances/": [str(host.pk)],
            "/api/v1/orders/": [str(host.order_id), str(waiting.pk)],
            "/api/v1/quotas/": [str(quota.pk)],
            "/api/v1/auth/tokens/": [str(pk) for pk in token_ids],
            "/api/v1/instance-types/": [name for name, _ in pairs[:5]],
            "/api/v1/images/": sorted({image for _, image in pairs}),
            "/api/v1/projects/": ["vision-lab", "nlp-lab"],
            "/api/v1/budgets/": ["vision-lab", "nlp-lab"],
            "/api/v1/audit/events/": [
                str(seq) for seq in AuditEvent.objects.values_list("seq", flat=True)[:3]
            ],
        },
    )


@pytest.fixture(autouse=True)
def _node_id_for_schemathesis(request):
    """Schemathesis 4.32's pytest loader reads ``Node._nodeid``, which pytest 9.2 renamed."""
    if not hasattr(request.node, "_nodeid"):
        request.node._nodeid = request.node.nodeid


@pytest.fixture
def in_process():
    """Django's WSGI handler closes the database connection around each request; the test's
    transaction lives on that connection, so keep it open (as Django's test client does)."""
    for signal in (request_started, request_finished):
        signal.disconnect(close_old_connections)
    yield
    for signal in (request_started, request_finished):
        signal.connect(close_old_connections)


def _schema(world: World, who: str):
    from instances.models import Instance
    from instances.services import agent_credential_issue

    token = world.tokens[who]
    # The host's own agent credential, for the one operation only a host's agent calls.
    host = Instance.objects.get(pk=world.path_values["/api/v1/instances/"][0])
    agent = f"Agent {agent_credential_issue(instance=host)}"
    # Given as the schemes' credentials, so Schemathesis sends them on every call except the
    # ones where it is testing a missing or broken Authorization header.
    # A request Schemathesis made invalid may also be refused as too long (414: a query string
    # past PORTAL_MAX_QUERY_LENGTH), which the schema documents on every operation.
    refusals = ["400", "401", "403", "404", "405", "406", "409", "414", "415", "422", "428"]
    config = schemathesis.Config.from_dict(
        {
            "auth": {
                "openapi": {"bearerToken": {"bearer": token}, "agentToken": {"api_key": agent}}
            },
            "checks": {"negative_data_rejection": {"expected-statuses": [*refusals, "429", "5xx"]}},
        }
    )
    return schemathesis.openapi.from_wsgi(
        "/api/v1/schema/",
        get_wsgi_application(),
        config=config,
        headers={"Authorization": f"Bearer {token}"},
    )


@pytest.fixture
def schema_as_admin(world, in_process):
    return _schema(world, "ada")


@pytest.fixture
def schema_as_researcher(world, in_process):
    return _schema(world, "alice")


def _pick(options, drawn) -> object:
    """One of the options, chosen by what Hypothesis drew (so shrinking still works)."""
    options = list(options)
    return options[zlib.crc32(repr(drawn).encode()) % len(options)]


def _is_positive(case) -> bool:
    meta = case.meta
    return meta is not None and meta.generation.mode.is_positive


def give_real_references(case, world: World, who: str) -> None:
    """Make a positive example mean something: the schema promises the shape of a request, not
    which projects, catalog names or ranges exist in this world."""
    path, method = case.operation.path, case.method.upper()
    real = next(
        (values for prefix, values in world.path_values.items() if path.startswith(prefix)), []
    )
    for name, value in (case.path_parameters or {}).items():
        # Most examples hit a real object, the others a drawn one (which answers 404).
        if real and zlib.crc32(repr(value).encode()) % 4:
            ids = {"sid": world.schedule_ids, "delivery": world.delivery_ids}.get(name, real)
            case.path_parameters[name] = _pick(ids, value)
    query = case.query if isinstance(case.query, dict) else None
    body = case.body if isinstance(case.body, dict) else None
    if path == "/api/v1/auth/tokens/" and method == "POST" and body is not None:
        body.update(username=who, password=PASSWORD)  # a token is issued for a real sign-in
    elif path == "/api/v1/orders/" and method == "POST" and body is not None:
        kind, image = _pick(world.pairs, body.get("instance_type"))
        body.update(
            project=_pick(world.projects[who], body.get("project")),
            instance_type=kind,
            image=image,
            ssh_public_key=ED25519,
        )
        if body.get("market") == "spot" and kind not in world.spot_types:
            body["market"] = "on_demand"
        # The floor of max_spot_price is the spot price of the moment: leave it to the cloud.
        body.pop("max_spot_price", None)
        if body.get("market") != "spot":
            body.pop("interruption_policy", None)
        # A cluster's size is nodes (2 or more), not count; EFA is the type's own
        # (tests/instances/test_clusters.py tries the rest).
        body.pop("efa", None)
        if body.get("placement") == "cluster":
            body.pop("count", None)
            body["nodes"] = 2
        else:
            body.pop("nodes", None)
        # A slice profile is a catalog name the server checks, on a portal that takes slices
        # (tests/instances/test_mig_orders.py tries them).
        body.pop("mig_profile", None)
    elif path == "/api/v1/jobs/" and method == "POST" and body is not None:
        kind, image = _pick(world.pairs, body.get("instance_type"))
        # A job's own rules (a command, variable names the portal does not set) are not the
        # schema's to say: a real command and variables; the negative cases try the rest.
        body.update(
            project=_pick(world.projects[who], body.get("project")),
            instance_type=kind,
            image=image,
            name="fuzz",
            command="python train.py",
            env={"SEED": "1"},
        )
        body.pop("ssh_public_key", None)
        body.pop("mig_profile", None)  # as an order's (tests/instances/test_mig_orders.py)
        # A cluster job of two nodes, as the orders' clusters above: tests/instances/
        # test_cluster_jobs.py tries the rest.
        if body.get("nodes", 1) != 1:
            body["nodes"] = 2
        if body.get("market") != "on_demand" and kind not in world.spot_types:
            body["market"] = "on_demand"
        # A working folder is a real tar archive, or a real repository (and ref), not both.
        if "workdir_tarball" in body:
            body["workdir_tarball"] = WORKDIR_TAR
            body.pop("workdir_git", None)
            body.pop("workdir_ref", None)
        elif body.get("workdir_git"):
            body["workdir_git"] = "https://git.example.org/lab/project.git"
            if body.get("workdir_ref"):
                body["workdir_ref"] = "main"
        else:
            body.pop("workdir_ref", None)
    elif path.startswith("/api/v1/webhooks/") and body is not None:
        # A URL the portal may call, in a project the caller can name (alice is a member, not
        # a manager: she hears 403); the schema says only that they are text.
        if method == "POST" or "url" in body:
            body["url"] = "https://hooks.example.org/fuzz"
        if method == "POST":
            body["project"] = _pick(world.projects[who], body.get("project"))
    elif path == "/api/v1/projects/{slug}/" and method == "PATCH" and body is not None:
        # The schema states each id's shape, not that a host id goes with host tenancy only,
        # nor that the world's spot pools keep a project off a dedicated host (tests/instances/
        # test_project_isolation.py tries both): shared or dedicated hardware here. Nor that
        # only a project without isolation of its own joins the portal's MIG pool (tests/
        # instances/test_mig_pool.py tries it): the world's projects keep their own hosts.
        if body.get("tenancy") == "host":
            body["tenancy"] = "dedicated"
        if body.get("host_id"):
            body["host_id"] = ""
        if "mig_pool" in body:
            body["mig_pool"] = "project"
    elif path == "/api/v1/quota-requests/" and method == "POST" and body is not None:
        body["project"] = _pick(world.projects[who], body.get("project"))
    elif path.startswith("/api/v1/pools/") and body is not None:
        _real_pool_body(path, method, body, world, who)
    elif path.endswith("/metrics/") and method == "POST" and body is not None:
        from instances.models import Instance
        from instances.services.telemetry import agent_secret

        # Only the host's own agent posts here: its credential, whichever scheme was drawn.
        host = Instance.objects.get(pk=world.path_values["/api/v1/instances/"][0])
        case.headers = {**(case.headers or {}), "Authorization": f"Agent {agent_secret(host)}"}
        # The schema cannot say "within the last 48 hours": readings of the last minutes.
        for index, reading in enumerate(body.get("readings") or []):
            if isinstance(reading, dict):
                reading["at"] = (timezone.now() - timedelta(minutes=index)).isoformat()
                _real_gpus(reading, host.instance_type)
    elif ("/job/" in path or "/agent/" in path) and path.startswith("/api/v1/instances/"):
        from instances.models import Instance
        from instances.services.telemetry import agent_secret

        # The agent's side of a job or a notebook: its host's own credential (the host runs no
        # job and has no notebook open, so it hears 204 and 409s; tests/instances/test_jobs.py
        # drives a real run, test_notebook_agent.py a real notebook).
        host = Instance.objects.get(pk=world.path_values["/api/v1/instances/"][0])
        case.headers = {**(case.headers or {}), "Authorization": f"Agent {agent_secret(host)}"}
    elif path.endswith("/idle-policy/") and method == "PUT" and body is not None:
        # Nor "the warning comes before the stop": keep the two in order.
        idle = body.get("idle_minutes", 60)
        if isinstance(idle, int) and isinstance(body.get("warning_minutes", 5), int):
            body["idle_minutes"] = max(idle, 6)
            body["warning_minutes"] = min(body.get("warning_minutes", 5), body["idle_minutes"] - 1)
    elif path.endswith("/approval-policy/") and method == "PUT" and body:
        # The schema cannot list the catalog's names: types the catalog offers.
        if isinstance(body.get("instance_types"), list):
            names = [name for name, _ in world.pairs]
            body["instance_types"] = [_pick(names, item) for item in body["instance_types"]]
    elif path.startswith("/api/v1/quotas/") and method in ("POST", "PUT", "PATCH") and body:
        if "project" in body:
            body["project"] = _pick(world.projects["ada"], body["project"])
        if body.get("member") is not None:
            body["member"] = "alice" if body.get("project") == "vision-lab" else "carol"
        names = [name for name, _ in world.pairs]
        if isinstance(body.get("allowed_instance_types"), list):
            body["allowed_instance_types"] = [
                _pick(names, item) for item in body["allowed_instance_types"]
            ]
        if isinstance(body.get("max_gpus_by_model"), dict):
            body["max_gpus_by_model"] = {
                _pick(world.gpu_models, key): value
                for key, value in body["max_gpus_by_model"].items()
            }
        if isinstance(body.get("allowed_markets"), dict):
            body["allowed_markets"] = {
                _pick(names, key): value for key, value in body["allowed_markets"].items()
            }
    elif query is not None:
        if "instance_type" in query and path in (
            "/api/v1/orders/estimate/",
            "/api/v1/images/",
            "/api/v1/costs/",
            "/api/v1/mig-profiles/",
        ):
            names = [name for name, _ in world.pairs]
            query["instance_type"] = _pick(names, query["instance_type"])
        if path == "/api/v1/orders/estimate/":
            query.pop("mig_profile", None)  # as the order's body above
            if query.get("placement") == "cluster":
                query["count"] = 2  # a cluster's nodes, as the order's body above
        if path == "/api/v1/instance-types/" and query.get("gpu_model"):
            # A GPU model is a name the server checks against the catalog, not a schema enum.
            drawn = query["gpu_model"]
            drawn = drawn if isinstance(drawn, list) else [drawn]
            query["gpu_model"] = [_pick(world.gpu_models, item) for item in drawn]
        if path == "/api/v1/costs/":
            _real_report_query(query, world, who)
        if path == "/api/v1/orders/estimate/" and str(query.get("count", "")).isdigit():
            # A count within its placement's bounds: a cluster's are 2 to 16, separate hosts'
            # 1 to 8 (the schema gives one range for both; tests/instances/test_clusters.py
            # tries the rest).
            from instances.selectors.clusters import order_size_bounds

            least, most = order_size_bounds(query.get("placement", "independent"))
            query["count"] = min(max(int(query["count"]), least), most)


def _real_gpus(reading: dict, kind) -> None:
    """Nor "as many GPUs as the host has, its memory, and totals that are their mean and sum":
    the drawn GPUs, cut to the host's, numbered from 0 and within its memory."""
    gpus = reading.get("gpus")
    if not isinstance(gpus, list) or not gpus:
        return
    del gpus[kind.gpu_count :]
    for index, gpu in enumerate(gpus):
        gpu["index"] = index
        gpu["memory_total_mib"] = min(gpu["memory_total_mib"], kind.gpu_memory_gib * 1024)
        gpu["memory_used_mib"] = min(gpu["memory_used_mib"], gpu["memory_total_mib"])
    reading["utilization"] = round(sum(gpu["utilization"] for gpu in gpus) / len(gpus))
    reading["memory_used_mib"] = sum(gpu["memory_used_mib"] for gpu in gpus)


def _real_pool_body(path: str, method: str, body: dict, world: World, who: str) -> None:
    """A pool names real things and keeps min <= desired <= max (and a schedule stays within
    the pool's approved max of 4); the schema says only that each is a number."""
    sizes = [body.get(name) for name in ("min_size", "desired", "max_size")]
    numbers = sorted(v for v in sizes if isinstance(v, int))
    if "/schedules/" not in path:
        if path == "/api/v1/pools/" and method == "POST":
            kind, image = _pick(world.pairs, body.get("instance_type"))
            body.update(
                project=_pick(world.projects[who], body.get("project")),
                name=f"fuzz-{zlib.crc32(repr(body).encode()) % 10_000}",
                instance_type=kind,
                image=image,
                ssh_public_key=ED25519,
                fallback_instance_types=[],
            )
            if kind not in world.spot_types:
                body["spot_percent"] = 0
            numbers = numbers or [1]
        elif body.get("spot_percent"):
            body["spot_percent"] = 0  # the world pool's g5.xlarge: keep the market as it is
        if numbers or "on_demand_base" in body:
            high = max(1, min(numbers[-1] if numbers else 1, 8))
            low = min(numbers[0] if numbers else 0, high)
            body.update(min_size=low, desired=low, max_size=high)
            if "on_demand_base" in body:
                body["on_demand_base"] = min(body["on_demand_base"], high)
        return
    if method == "POST" or "cron" in body:
        body["cron"] = "0 9 * * 1-5"
    if method == "POST" or "timezone" in body:
        body["timezone"] = _pick(["UTC", "Asia/Shanghai", "Europe/Berlin"], body.get("timezone"))
    # A schedule keeps at least one size (its only one set to null answers 400).
    if (
        numbers
        or method == "POST"
        or any(name in body for name in ("min_size", "max_size"))
        or ("desired" in body)
    ):
        value = min(numbers[0] if numbers else 2, 4)
        body.update(min_size=None, max_size=None, desired=value)


def _real_report_query(query: dict, world: World, who: str) -> None:
    if query.get("project"):
        query["project"] = _pick(world.projects[who], query["project"])
    if query.get("user"):
        query["user"] = _pick(world.users[who], query["user"])
    if query.get("pool"):
        query["pool"] = world.path_values["/api/v1/pools/"][0]  # a pool both may see
    # A report runs forwards, from the 1st of this month and to today unless told.
    today = timezone.now().date()
    start = date.fromisoformat(query["start"]) if query.get("start") else today.replace(day=1)
    end = date.fromisoformat(query["end"]) if query.get("end") else None
    if end is None:
        end = max(start, today) if query.get("start") else today
    start, end = sorted((start, end))
    # ... over at most three years, and one by the day.
    longest = 366 if query.get("granularity") == "day" else 3 * 366
    end = min(end, start + timedelta(days=longest - 1))
    query.update(start=start.isoformat(), end=end.isoformat())


def exercise(case, world: World, who: str) -> None:
    if _is_positive(case):
        give_real_references(case, world, who)
    with transaction.atomic():
        response = case.call()
        transaction.set_rollback(True)
    if _is_positive(case) and response.status_code == 401:
        pytest.fail(f"{case.method} {case.path} refused the fuzz's credentials: {response.text}")
    case.validate_response(response, checks=CHECKS)


as_admin = schemathesis.pytest.from_fixture("schema_as_admin")
as_researcher = schemathesis.pytest.from_fixture("schema_as_researcher")

# Each persona's operations in three tests of about equal work (a third of the calls each),
# so that ``make test``'s workers run them side by side instead of one worker running a
# persona's every operation while the others wait at the end of the suite.
HOSTS = r"^/api/v1/(orders|instances)/"
POOLS_AND_JOBS = r"^/api/v1/(pools|jobs)/"


def _fuzz(lazy, who: str):
    @lazy.parametrize()
    @FUZZ
    def test(case, world):
        exercise(case, world, who)

    return test


test_every_order_and_host_operation_as_an_admin = _fuzz(as_admin.include(path_regex=HOSTS), "ada")
test_every_pool_and_job_operation_as_an_admin = _fuzz(
    as_admin.include(path_regex=POOLS_AND_JOBS), "ada"
)
test_every_other_operation_as_an_admin = _fuzz(
    as_admin.exclude(path_regex=HOSTS).exclude(path_regex=POOLS_AND_JOBS), "ada"
)
test_every_order_and_host_operation_as_a_researcher = _fuzz(
    as_researcher.include(path_regex=HOSTS), "alice"
)
test_every_pool_and_job_operation_as_a_researcher = _fuzz(
    as_researcher.include(path_regex=POOLS_AND_JOBS), "alice"
)
test_every_other_operation_as_a_researcher = _fuzz(
    as_researcher.exclude(path_regex=HOSTS).exclude(path_regex=POOLS_AND_JOBS), "alice"
)
