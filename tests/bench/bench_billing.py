"""Cost reports at 10 million usage rows: rollups vs usage, API vs SQL, refresh vs rebuild."""

from __future__ import annotations

import os
import statistics
import time
import warnings
from datetime import UTC, date, datetime, timedelta

# Three months of a busy portal. A "slot" is a place where one host after another runs (each
# lives 12 to 168 hours); SLOTS hosts run at every hour. Every host is metered in one piece per
# hour: metering cuts a run at each price change and at midnight, and the bench's spot prices
# move on the hour (on-demand hosts are cut on the hour too, to keep one shape).
ROWS = 10_000_000
FIRST_DAY = date(2026, 6, 1)
DAYS = 92
LAST_DAY = FIRST_DAY + timedelta(days=DAYS - 1)
NEXT_DAY = FIRST_DAY + timedelta(days=DAYS)
HOURS = DAYS * 24
SLOTS = -(-ROWS // HOURS)  # 4,529: the last hour is 32 rows short of full
START = datetime(FIRST_DAY.year, FIRST_DAY.month, FIRST_DAY.day, tzinfo=UTC)
PROJECTS = 20
USERS_PER_PROJECT = 4
TYPES_PER_PROJECT = 4
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl b@x"

# A slot's hosts live LIFE hours each; at START the slot's first host is PHASE hours old.
LIFE = "(12 + mod({k} * 7919, 157))"
PHASE = "mod({k} * 104729, " + LIFE + ")"

GOAL_SPEEDUP = 50  # (a) report from rollups vs from usage rows, at least
GOAL_API_RATIO = 1.5  # (b) API vs its bare SQL, at most
GOAL_REFRESH_PERCENT = 1.0  # (c) refresh after a new hour vs full rebuild, at most

# The report's figures straight from the usage rows (the rollups' query, on billing_usage).
USAGE_REPORT_SQL = """
    SELECT date_trunc('month', day)::date, project_id,
        SUM(cost_rs) FILTER (WHERE NOT market = 'spot'),
        SUM(cost_rs) FILTER (WHERE market = 'spot'),
        SUM(list_cost_rs), SUM(cost_rs), SUM(gpu_seconds)
    FROM billing_usage WHERE day >= %s AND day <= %s
    GROUP BY 1, 2
"""


def run(report) -> None:
    from django.conf import settings
    from django.db import connection

    if connection.vendor != "postgresql":
        report("billing bench", "skipped", "needs PostgreSQL: set DATABASE_URL=postgres://...")
        return
    # Measured as production runs (see bench_audit): with DEBUG on, Django keeps every query.
    debug = settings.DEBUG
    settings.DEBUG = False
    try:
        with warnings.catch_warnings():
            # whitenoise notes the missing STATIC_ROOT; the bench serves no static files.
            warnings.filterwarnings("ignore", message="No directory at", category=UserWarning)
            _run(report)
    finally:
        settings.DEBUG = debug


class Lit:
    """A value sent as a query parameter (not SQL) in _insert_select's columns."""

    def __init__(self, value) -> None:
        self.value = value


def _insert_select(cursor, model, values: dict, source: str, params=()) -> None:
    """INSERT INTO the model's table SELECT ... FROM source. ``values`` maps a column to SQL
    (or a Lit); other columns get the field's default, so a field added later with a default
    does not break the bench."""
    from django.db import connection

    columns, selects, literals = [], [], []
    for f in model._meta.concrete_fields:
        if f.column in values:
            value = values[f.column]
        elif f.primary_key or f.has_db_default():
            continue
        else:
            value = Lit(f.get_default())
        columns.append(connection.ops.quote_name(f.column))
        if isinstance(value, Lit):
            selects.append("%s")
            literals.append(f.get_db_prep_save(value.value, connection))
        else:
            selects.append(value)
    cursor.execute(
        f"INSERT INTO {model._meta.db_table} ({', '.join(columns)}) "  # noqa: S608 - our SQL
        f"SELECT {', '.join(selects)} FROM {source}",
        [*literals, *params],
    )


def _people():
    from django.core.management import call_command

    from portal.models import Membership, User
    from portal.services import membership_set, project_upsert, user_upsert

    with open(os.devnull, "w") as quiet:
        call_command("sync_catalog", verbosity=0, stdout=quiet, stderr=quiet)
    fin, _ = user_upsert(username="bench-fin", role=User.Role.FINANCE)
    projects, users = [], []
    for p in range(PROJECTS):
        project, _ = project_upsert(slug=f"lab-{p:02d}", name=f"Lab {p:02d}")
        projects.append(project)
        for u in range(USERS_PER_PROJECT):
            user, _ = user_upsert(username=f"r{p:02d}-{u}", role=User.Role.RESEARCHER)
            membership_set(project=project, user=user, role=Membership.Role.MEMBER)
            users.append(user)
    return fin, projects, users


def _hosts(cursor, projects, users) -> tuple[int, int]:
    """Every host as a row of the scratch table bench_host (unlogged rather than temporary,
    so that it outlives a reconnection), then an Order and an Instance for each, all from
    generate_series. Returns (hosts, instance types used)."""
    from django.conf import settings

    from billing.lib.money import micros
    from instances.models import Image, Instance, InstanceType, Order

    types = list(InstanceType.objects.offered().order_by("on_demand_price_per_hour", "name"))
    image = Image.objects.order_by("name").first()
    cursor.execute(
        f"""
        CREATE UNLOGGED TABLE bench_host AS
        WITH slot AS (
            SELECT k, {LIFE.format(k="k")} AS life, {PHASE.format(k="k")} AS phase,
                -- a few big labs, many small ones
                floor(%(projects)s * power(mod(k * 7919, 10007) / 10007.0, 2))::int AS p
            FROM generate_series(0, %(slots)s - 1) AS k
        ), host AS (
            SELECT k, g, life, p,
                g * life - phase AS first_hour,
                (g + 1) * life - phase - 1 AS last_hour,
                -- each lab uses four types of the catalog, each member hosts of all four
                mod(p * 5 + mod(k * 31 + g * 17, %(tpp)s) * 3, %(ntypes)s) + 1 AS t,
                p * %(upp)s + mod(k + g, %(upp)s) + 1 AS u,
                mod(k * 13 + g * 7, 10) < 4 AS wants_spot,
                60 + mod(k * 7 + g * 13, 3000) AS launch_second,
                600 + mod(k * 11 + g * 3, 2900) AS end_second
            FROM slot, LATERAL generate_series(0, (%(hours)s + 24 + phase) / life) AS g
        )
        SELECT k, g, life, first_hour, last_hour, launch_second, end_second,
            md5('bench-host-' || k || '-' || g)::uuid AS id,
            md5('bench-order-' || k || '-' || g)::uuid AS order_id,
            (%(project_ids)s::bigint[])[p + 1] AS project_id,
            (%(user_ids)s::bigint[])[u] AS user_id,
            t AS type_pos,
            (%(type_ids)s::bigint[])[t] AS instance_type_id,
            (%(gpu_models)s::text[])[t] AS gpu_model,
            (%(gpu_counts)s::int[])[t] AS gpu_count,
            (%(list_rates)s::bigint[])[t] AS list_rate,
            CASE WHEN wants_spot AND (%(spot)s::bool[])[t] THEN 'spot' ELSE 'on_demand' END
                AS market,
            %(start)s::timestamptz + first_hour * interval '1 hour'
                + launch_second * interval '1 second' AS run_start,
            %(start)s::timestamptz + last_hour * interval '1 hour'
                + end_second * interval '1 second' AS run_end
        FROM host
        """,  # noqa: S608 - constants of this module, values as parameters
        {
            "projects": PROJECTS,
            "slots": SLOTS,
            "tpp": TYPES_PER_PROJECT,
            "upp": USERS_PER_PROJECT,
            "ntypes": len(types),
            "hours": HOURS,
            "project_ids": [p.pk for p in projects],
            "user_ids": [u.pk for u in users],
            "type_ids": [t.pk for t in types],
            "gpu_models": [t.gpu_model for t in types],
            "gpu_counts": [t.gpu_count for t in types],
            "list_rates": [micros(t.on_demand_price_per_hour) for t in types],
            "spot": [t.spot_offered for t in types],
            "start": START,
        },
    )
    cursor.execute("CREATE UNIQUE INDEX ON bench_host (k, g)")
    cursor.execute("ANALYZE bench_host")
    ended = f"h.last_hour < {HOURS + 24}"  # hosts still running after the next day
    _insert_select(
        cursor,
        Order,
        {
            "id": "h.order_id",
            "requester_id": "h.user_id",
            "project_id": "h.project_id",
            "instance_type_id": "h.instance_type_id",
            "image_id": Lit(image.pk),
            "market": "h.market",
            "count": "1",
            "lease_hours": "h.life",
            "region": Lit(settings.PORTAL_REGION),
            "ssh_public_key": Lit(KEY),
            "ssh_key_fingerprint": Lit("SHA256:bench"),
            "interruption_policy": "CASE WHEN h.market = 'spot' THEN 'notify' ELSE '' END",
            "quoted_price_per_hour": "h.list_rate / 1000000.0",
            "status": Lit(Order.Status.PLACED),
            "created_at": "h.run_start - interval '2 minutes'",
        },
        "bench_host h",
    )
    _insert_select(
        cursor,
        Instance,
        {
            "id": "h.id",
            "order_id": "h.order_id",
            "project_id": "h.project_id",
            "owner_id": "h.user_id",
            "instance_type_id": "h.instance_type_id",
            "image_id": Lit(image.pk),
            "market": "h.market",
            "region": Lit(settings.PORTAL_REGION),
            "status": f"CASE WHEN {ended} THEN 'terminated' ELSE 'running' END",
            "status_changed_at": f"CASE WHEN {ended} THEN h.run_end ELSE h.run_start END",
            "client_token": "'portal-' || replace(h.id::text, '-', '')",
            "cloud_id": "'i-' || substr(md5(h.id::text), 1, 17)",
            "availability_zone": Lit(f"{settings.PORTAL_REGION}a"),
            "launched_at": "h.run_start",
            "last_seen_at": f"CASE WHEN {ended} THEN h.run_end ELSE NULL END",
            "created_at": "h.run_start - interval '1 minute'",
        },
        "bench_host h",
    )
    cursor.execute("SELECT count(*), count(DISTINCT instance_type_id) FROM bench_host")
    return cursor.fetchone()


def _insert_usage(cursor, first_hour: int, last_hour: int, limit: int | None = None) -> None:
    """The usage rows of every host running in hours first_hour..last_hour (counted from
    START), in one INSERT ... SELECT over generate_series; ``limit`` keeps hour * SLOTS + slot
    below it.

    A row is one host-hour: from the hour (or the launch) to the next hour (or the host's
    end), so it never crosses midnight; rates are whole µ$/hour, a type's spot price moving
    every hour; charges are rate x seconds (every run is hours long: no minimum applies)."""
    from billing.models import Usage

    piece = (
        "(SELECT CASE WHEN hour = h.first_hour THEN h.launch_second ELSE 0 END AS since, "
        "CASE WHEN hour = h.last_hour THEN h.end_second ELSE 3600 END AS until, "
        "CASE WHEN h.market = 'spot' "
        "THEN h.list_rate * (28 + mod(hour * 7 + h.type_pos * 13, 17)) / 100 "
        "ELSE h.list_rate END AS rate) AS p"
    )
    seconds = "(p.until - p.since)"
    at = f"'{START.isoformat()}'::timestamptz + hour * interval '1 hour'"
    _insert_select(
        cursor,
        Usage,
        {
            "instance_id": "h.id",
            "run_start": "h.run_start",
            "start": f"{at} + p.since * interval '1 second'",
            "end": f"{at} + p.until * interval '1 second'",
            "day": f"'{FIRST_DAY.isoformat()}'::date + (hour / 24)::int",
            "project_id": "h.project_id",
            "user_id": "h.user_id",
            "instance_type_id": "h.instance_type_id",
            "gpu_model": "h.gpu_model",
            "market": "h.market",
            "rule": "'per_second'",
            "seconds": seconds,
            "billed_seconds": seconds,
            "list_billed_seconds": seconds,
            "gpu_seconds": f"{seconds} * h.gpu_count",
            "rate_micros": "p.rate",
            "list_rate_micros": "h.list_rate",
            "cost_rs": f"p.rate * {seconds}",
            "list_cost_rs": f"h.list_rate * {seconds}",
            "updated_at": "now()",
        },
        # Hour-major, as metering writes them: a day's rows lie together in the table.
        f"""generate_series(%s::int, %s::int) AS hour
        CROSS JOIN generate_series(0, {SLOTS - 1}) AS slot
        JOIN bench_host h ON h.k = slot
            AND h.g = (hour + {PHASE.format(k="slot")}) / {LIFE.format(k="slot")}
        CROSS JOIN LATERAL {piece}
        WHERE hour * {SLOTS} + slot < %s""",
        [first_hour, last_hour, limit or 2**62],
    )


def _load_usage(cursor) -> None:
    """All the usage rows in one INSERT ... SELECT, loaded as bulk loads are: the secondary
    indexes dropped and built again after (a sort each, not 10 million random inserts into
    the (uuid, start) b-tree), the foreign keys checked once by a join, not row by row."""
    from django.db import connection

    from billing.models import Usage
    from instances.models import Instance

    quote = connection.ops.quote_name
    table = Usage._meta.db_table
    cursor.execute(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE conrelid = %s::regclass AND contype = 'u'",
        [table],
    )
    constraints = cursor.fetchall()
    cursor.execute(
        "SELECT indexname, indexdef FROM pg_indexes "
        "WHERE schemaname = current_schema() AND tablename = %s AND indexname NOT IN "
        "(SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass)",
        [table, table],
    )
    indexes = cursor.fetchall()
    for name, _ in constraints:
        cursor.execute(f"ALTER TABLE {quote(table)} DROP CONSTRAINT {quote(name)}")
    for name, _ in indexes:
        cursor.execute(f"DROP INDEX {quote(name)}")
    # The join with bench_host in memory; no foreign key trigger event per row.
    cursor.execute("SET LOCAL work_mem = '256MB'")
    cursor.execute("SET LOCAL session_replication_role = replica")
    _insert_usage(cursor, 0, HOURS - 1, limit=ROWS)
    cursor.execute("SET LOCAL session_replication_role = origin")
    # What the four foreign keys would check, and more: each row's host exists and agrees.
    hosts = quote(Instance._meta.db_table)
    cursor.execute(
        f"SELECT count(*) FROM {quote(table)} u JOIN {hosts} i ON i.id = u.instance_id "  # noqa: S608
        "AND i.project_id = u.project_id AND i.owner_id = u.user_id "
        "AND i.instance_type_id = u.instance_type_id AND i.market = u.market"
    )
    matched = cursor.fetchone()[0]
    assert matched == ROWS, f"{ROWS - matched} usage rows do not match their host"
    cursor.execute("SET LOCAL maintenance_work_mem = '1GB'")
    for name, definition in constraints:
        cursor.execute(f"ALTER TABLE {quote(table)} ADD CONSTRAINT {quote(name)} {definition}")
    for _, definition in indexes:
        cursor.execute(definition)


def _fetch(sql: str, params=None) -> list:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _cells(rows) -> dict:
    """(period, project) -> exact integer sums, whatever types the driver returned (the five
    sums that follow the period and the key; the report's query reads each label after them)."""
    cells = {}
    for period, key, *sums in (row[:7] for row in rows):
        if isinstance(period, datetime):
            period = period.date()
        cells[(period, key)] = tuple(int(value or 0) for value in sums)
    return cells


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def _goal(met: bool) -> str:
    return "met" if met else "NOT MET"


def _run(report) -> None:
    from django.db import connection, transaction

    from billing.services.rollups import rollups_rebuild

    load = os.getloadavg()[0]
    fin, projects, users = _people()

    # 1. The data: hosts, then the usage rows in one INSERT ... SELECT; then the rollups.
    started = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cursor:
        hosts, kinds = _hosts(cursor, projects, users)
    hosts_took = time.perf_counter() - started
    started = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cursor:
        _load_usage(cursor)
    built = time.perf_counter() - started
    rows = _fetch("SELECT count(*) FROM billing_usage")[0][0]
    assert rows == ROWS, rows
    report(
        "usage rows: one INSERT ... SELECT over generate_series",
        f"{rows:,}",
        f"{built:.1f} s with index builds; {DAYS} days from {FIRST_DAY}, {hosts:,} hosts "
        f"({hosts_took:.1f} s), {PROJECTS} projects, {len(users)} users, {kinds} types",
    )
    started = time.perf_counter()
    with connection.cursor() as cursor:
        # As autovacuum would leave the table: statistics, hint bits, visibility map.
        cursor.execute("VACUUM ANALYZE billing_usage")
    report("VACUUM ANALYZE billing_usage", f"{time.perf_counter() - started:.1f} s")

    rebuilds = []
    for _ in range(3):
        started = time.perf_counter()
        rollups = rollups_rebuild()
        rebuilds.append(time.perf_counter() - started)
    rebuild = statistics.median(rebuilds)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE billing_dailyrollup")
    report(
        "full rebuild: rollups_rebuild()",
        f"{rebuild:.2f} s",
        f"median of {', '.join(f'{t:.2f}' for t in rebuilds)} s; {rollups:,} rollup rows",
    )

    rollup_sql = _report_vs_usage(report, fin)
    _api_vs_sql(report, fin, rollup_sql)
    _refresh_vs_rebuild(report, rebuild)
    with connection.cursor() as cursor:
        # The next modules start from a portal without these 10 million rows (deleting a host
        # or a type through the ORM would otherwise load its usage rows to cascade).
        cursor.execute("DROP TABLE bench_host")
        cursor.execute(
            "TRUNCATE billing_usage, billing_dailyrollup, billing_rollupdelta, "
            "instances_instance, instances_order CASCADE"
        )
    report(
        "load average (1 min) at start / end",
        f"{load:.2f} / {os.getloadavg()[0]:.2f}",
        f"{os.cpu_count()} CPUs; other work on the machine widens the spread",
    )


def _report_vs_usage(report, fin) -> str:
    """(a) The monthly report by project from the rollups vs the same figures from the usage
    rows; returns the SQL the report runs on the rollups."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from billing.lib.money import GPU_SECONDS_PER_TENTH_HOUR, RS_PER_CENT, round_half_up
    from billing.models import DailyRollup
    from billing.selectors.reports import ReportQuery, cost_report

    query = ReportQuery(start=FIRST_DAY, end=LAST_DAY, group_by="project", granularity="month")
    with CaptureQueriesContext(connection) as captured:
        result = cost_report(viewer=fin, query=query)
    rollup_sql = next(
        q["sql"] for q in captured.captured_queries if DailyRollup._meta.db_table in q["sql"]
    )
    # The same numbers, exactly: cell by cell in rate-seconds, then the report's rounded total.
    from_rollups = _cells(_fetch(rollup_sql))
    from_usage = _cells(_fetch(USAGE_REPORT_SQL, [FIRST_DAY, LAST_DAY]))
    assert from_rollups == from_usage, "the rollups do not add up to the usage rows"
    on_demand, spot, list_cost, cost, gpu = (
        sum(cell[i] for cell in from_usage.values()) for i in range(5)
    )
    total = result.total
    assert total.on_demand_cents == round_half_up(on_demand, RS_PER_CENT)
    assert total.spot_cents == round_half_up(spot, RS_PER_CENT)
    assert total.savings_cents == round_half_up(list_cost - cost, RS_PER_CENT)
    assert total.gpu_tenths == round_half_up(gpu, GPU_SECONDS_PER_TENTH_HOUR)

    on_rollups, on_usage = [], []
    _fetch(USAGE_REPORT_SQL, [FIRST_DAY, LAST_DAY])  # warm-up (the report ran above)
    for _ in range(5):
        on_usage.append(_timed(lambda: _fetch(USAGE_REPORT_SQL, [FIRST_DAY, LAST_DAY])))
        for _ in range(4):
            on_rollups.append(_timed(lambda: cost_report(viewer=fin, query=query)))
    fast, slow = _ms(on_rollups), _ms(on_usage)
    report(
        "(a) monthly report by project: cost_report(), rollups",
        f"{fast:.1f} ms",
        f"median of {len(on_rollups)}; {len(from_rollups)} lines, total ${total.cost:,}",
    )
    report(
        "(a) the same figures by GROUP BY over the usage rows",
        f"{slow:.0f} ms",
        f"median of {len(on_usage)}; equal to the rollups' to the rate-second",
    )
    report(
        "(a) report from rollups: speed-up",
        f"{slow / fast:.0f}x",
        f"goal >= {GOAL_SPEEDUP}x: {_goal(slow / fast >= GOAL_SPEEDUP)}",
    )
    return rollup_sql


def _api_vs_sql(report, fin, rollup_sql: str) -> None:
    """(b) GET /api/v1/costs/ vs the bare SQL it runs on the rollups."""
    from django.test import Client

    client = Client()
    client.force_login(fin)
    months = f"/api/v1/costs/?group_by=project&granularity=month&start={FIRST_DAY}"
    url = f"{months}&end={LAST_DAY}"
    # A month with no usage: what a request costs whatever the report holds.
    empty = "/api/v1/costs/?group_by=project&granularity=month&start=2026-01-01&end=2026-01-31"

    def api(path: str = url) -> None:
        response = client.get(path)
        assert response.status_code == 200, response.content[:300]

    from billing.selectors.reports import ReportQuery, cost_report

    body = client.get(url).json()
    assert len(body["lines"]) == PROJECTS * 3, len(body["lines"])
    query = ReportQuery(start=FIRST_DAY, end=LAST_DAY, group_by="project", granularity="month")
    on_api, on_sql, on_empty, on_report = [], [], [], []
    for _ in range(3):
        api()
        api(empty)
        _fetch(rollup_sql)
    for index in range(30):
        # Interleaved, alternating which goes first, so drift hits both sides alike.
        pair = [(on_api, api), (on_sql, lambda: _fetch(rollup_sql))]
        for samples, fn in pair if index % 2 == 0 else pair[::-1]:
            samples.append(_timed(fn))
        on_empty.append(_timed(lambda: api(empty)))
        on_report.append(_timed(lambda: cost_report(viewer=fin, query=query)))
    whole, bare, own = _ms(on_api), _ms(on_sql), _ms(on_report)
    report(
        "(b) GET /api/v1/costs/ month by project, as finance",
        f"{whole:.1f} ms",
        f"median of {len(on_api)}; test Client, session login ({_sessions()}), audit on",
    )
    report(
        "(b) the bare SQL on the rollups (the report's own query)",
        f"{bare:.1f} ms",
        f"median of {len(on_sql)}; cursor.execute + fetchall",
    )
    report(
        "(b) API / bare SQL",
        f"{whole / bare:.2f}x",
        f"goal <= {GOAL_API_RATIO}x: {_goal(whole / bare <= GOAL_API_RATIO)}",
    )
    report(
        "(b) ... the same endpoint for a month with no usage",
        f"{_ms(on_empty):.1f} ms",
        "median of 30: the fixed cost of a request (auth, audit, form, DRF)",
    )
    # Where the rest goes: the report beside its SQL (building and compiling the query, reading
    # its rows, the rounding), and the request around the report (the fixed cost above, the
    # JSON body, rendering). The groups' labels are read in the same query.
    report(
        "(b) ... cost_report() itself, beside the bare SQL",
        f"{own:.1f} ms",
        f"median of 30; {own - bare:+.1f} ms: the ORM and the rounding",
    )
    report(
        "(b) ... the request around cost_report()",
        f"{whole - own:.1f} ms",
        "API less cost_report(): session, user, audit row, DRF, the JSON body",
    )


def _sessions() -> str:
    """Where the API's sessions are read: the shared cache when PORTAL_CACHE_URL is set (as
    compose deploys it), else the database; the first costs about a millisecond less."""
    from django.conf import settings

    cached = settings.SESSION_ENGINE.endswith("cached_db")
    return "read from the shared cache" if cached else "read from the database"


def _refresh_vs_rebuild(report, rebuild: float) -> None:
    """(c) A new hour of usage, with the deltas metering writes beside it, added to the
    rollups by rollups_refresh(), vs the full rebuild."""
    from django.db import connection

    from billing.models import RollupDelta
    from billing.services.rollups import rollups_refresh

    def new_hour(hour: int) -> float:
        """Write hour ``hour`` of the day after the data as metering would: its usage rows and
        one delta per row (each host's pass adds its new row to its rollup key)."""
        with connection.cursor() as cursor:
            _insert_usage(cursor, HOURS + hour, HOURS + hour)
            began = time.perf_counter()
            cursor.execute(
                "INSERT INTO billing_rollupdelta (day, project_id, user_id, instance_type_id, "
                "gpu_model, market, seconds, billed_seconds, gpu_seconds, cost_rs, "
                "list_cost_rs, pool_key, mig_profile, pieces) SELECT day, project_id, "
                "user_id, instance_type_id, gpu_model, market, seconds, billed_seconds, "
                "gpu_seconds, cost_rs, list_cost_rs, pool_key, mig_profile, 1 FROM billing_usage "
                "WHERE day = %s AND start >= %s AND start < %s",
                [
                    NEXT_DAY,
                    START + timedelta(hours=HOURS + hour),
                    START + timedelta(hours=HOURS + hour + 1),
                ],
            )
            return time.perf_counter() - began

    def refresh() -> float:
        took = _timed(rollups_refresh)
        assert not RollupDelta.objects.exists()
        return took

    writes, early, late = [], [], []
    for hour in range(24):  # each hour rolled up as the next metering pass would
        writes.append(new_hour(hour))
        took = refresh()
        if hour < 5:
            early.append(took)
        elif hour >= 19:
            late.append(took)
    for label, times in (("00-04h", early), ("19-23h", late)):
        took = statistics.median(times)
        percent = took / rebuild * 100
        report(
            f"(c) rollups_refresh() after a new hour, {NEXT_DAY} {label}",
            f"{took * 1000:.1f} ms",
            f"median of {len(times)}; {percent:.2f} % of the full rebuild "
            f"(goal <= {GOAL_REFRESH_PERCENT:g} %: {_goal(percent <= GOAL_REFRESH_PERCENT)})",
        )
    report(
        "(c) ... metering's delta rows for that hour (not in the above)",
        f"{statistics.median(writes) * 1000:.1f} ms",
        f"median of 24; {SLOTS:,} usage rows and as many deltas an hour",
    )
    usage = _fetch("SELECT SUM(cost_rs), COUNT(*) FROM billing_usage WHERE day = %s", [NEXT_DAY])
    rolled = _fetch(
        "SELECT SUM(cost_rs), SUM(pieces) FROM billing_dailyrollup WHERE day = %s", [NEXT_DAY]
    )
    assert [int(v) for v in usage[0]] == [int(v) for v in rolled[0]], (usage, rolled)
