"""The daily rollups: usage rows summed by day, project, user, type, market and pool for
reports.

Metering writes a delta for every usage row it adds, changes or removes (RollupDeltas, in the
same transaction); a refresh adds the pending deltas to the rollup rows; a rebuild recomputes
them from the usage rows (a repair).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import date

from django.db import connection, transaction

from audit.services import audit_record_system
from billing.models import DailyRollup, RollupDelta, Usage

# A rollup row's key and the sums it keeps, in the order RollupDelta and DailyRollup have them.
_ROLLUP_KEY = (
    "day",
    "project_id",
    "user_id",
    "instance_type_id",
    "gpu_model",
    "market",
    "pool_key",
    "mig_profile",
)
_ROLLUP_SUMS = ("seconds", "billed_seconds", "gpu_seconds", "cost_rs", "list_cost_rs")


class RollupDeltas:
    """What one metering transaction changed, summed per rollup key (exact integers)."""

    def __init__(self) -> None:
        self.sums: dict[tuple, list[int]] = defaultdict(lambda: [0] * (len(_ROLLUP_SUMS) + 1))

    def add(self, row: Usage, sign: int) -> None:
        sums = self.sums[tuple(getattr(row, name) for name in _ROLLUP_KEY)]
        for index, name in enumerate(_ROLLUP_SUMS):
            sums[index] += sign * getattr(row, name)
        sums[-1] += sign

    def save(self) -> None:
        RollupDelta.objects.bulk_create(
            [
                RollupDelta(
                    **dict(zip(_ROLLUP_KEY, key, strict=True)),
                    **dict(zip(_ROLLUP_SUMS, sums, strict=False)),
                    pieces=sums[-1],
                )
                for key, sums in sorted(self.sums.items())
                if any(sums)
            ]
        )


_ROLLUP_COLUMNS = (
    "day, project_id, user_id, instance_type_id, gpu_model, market, pool_key, mig_profile, "
    "seconds, billed_seconds, gpu_seconds, cost_rs, list_cost_rs, pieces"
)
_ROLLUP_SELECT = (
    "SELECT day, project_id, user_id, instance_type_id, gpu_model, market, pool_key, mig_profile, "
    "SUM(seconds), SUM(billed_seconds), SUM(gpu_seconds), SUM(cost_rs), SUM(list_cost_rs), "
    "COUNT(*) FROM {usage} {where} "
    "GROUP BY day, project_id, user_id, instance_type_id, gpu_model, market, pool_key, mig_profile"
)


def _rollup_insert(where: str = "", params=()) -> None:
    sql = f"INSERT INTO {DailyRollup._meta.db_table} ({_ROLLUP_COLUMNS}) " + _ROLLUP_SELECT.format(
        usage=Usage._meta.db_table, where=where
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def _rollups_add(sums: dict[tuple, list[int]]) -> None:
    """Add summed deltas to their rollup rows in one upsert per 500 keys (a row is created
    the first time its key is seen), then drop rows left with no usage."""
    table = DailyRollup._meta.db_table
    columns = [*_ROLLUP_KEY, *_ROLLUP_SUMS, "pieces"]
    sums_at = len(_ROLLUP_KEY)
    adds = ", ".join(f"{name} = {table}.{name} + excluded.{name}" for name in columns[sums_at:])
    more = ", ".join(f"{name} = {name} + %s" for name in columns[sums_at:])
    # A key that lost usage rows has a negative piece count, which an INSERT may not carry
    # even when it ends in the update (pieces >= 0 is checked first): those are updated alone.
    rows = sorted((key, delta) for key, delta in sums.items() if delta[-1] >= 0)
    fewer = sorted((key, delta) for key, delta in sums.items() if delta[-1] < 0)
    with connection.cursor() as cursor:
        for key, delta in fewer:
            cursor.execute(
                f"UPDATE {table} SET {more} WHERE "  # noqa: S608 - our own table and columns
                + " AND ".join(f"{name} = %s" for name in _ROLLUP_KEY),
                [*delta, *key],
            )
            if cursor.rowcount != 1:
                # Rows leave a key only after they entered it: the rollups are damaged.
                raise RuntimeError(
                    f"No rollup row for {key} to take {-delta[-1]} usage row(s) from; "
                    "run manage.py billing_meter --rebuild-rollups."
                )
        for start in range(0, len(rows), 500):
            chunk = rows[start : start + 500]
            values = ", ".join(["(" + ", ".join(["%s"] * len(columns)) + ")"] * len(chunk))
            cursor.execute(
                f"INSERT INTO {table} ({', '.join(columns)}) VALUES {values} "  # noqa: S608
                f"ON CONFLICT ({', '.join(_ROLLUP_KEY)}) "
                f"DO UPDATE SET {adds}",
                [value for key, delta in chunk for value in (*key, *delta)],
            )
    DailyRollup.objects.filter(
        project_id__in={key[1] for key in sums}, day__in={key[0] for key in sums}, pieces=0
    ).delete()


def rollups_refresh(*, batch: int = 10_000) -> int:
    """Add the pending deltas to the rollup rows; return how many (day, project) pairs changed.

    Deltas are taken by DELETE ... RETURNING: only committed ones are seen, and a delta another
    refresh is taking is waited for and then gone, so each is added exactly once; one committed
    meanwhile waits for the next pass. Rollups plus pending deltas always equal the usage rows.
    Against a rebuild, PostgreSQL's table lock orders the two (SQLite has one writer)."""
    changed: set[tuple[date, int]] = set()
    fields = [*_ROLLUP_KEY, *_ROLLUP_SUMS, "pieces"]
    while True:
        with transaction.atomic():
            table = RollupDelta._meta.db_table
            with connection.cursor() as cursor:
                # Taken and deleted in one statement: only deltas committed by now, each once.
                cursor.execute(
                    f"DELETE FROM {table} WHERE id IN "  # noqa: S608 - our own table
                    f"(SELECT id FROM {table} ORDER BY id LIMIT %s) RETURNING {', '.join(fields)}",
                    [batch],
                )
                pending = cursor.fetchall()
            if not pending:
                return len(changed)
            keyed = len(_ROLLUP_KEY)
            sums: dict[tuple, list[int]] = defaultdict(lambda: [0] * (len(_ROLLUP_SUMS) + 1))
            for values in pending:
                total = sums[tuple(values[:keyed])]
                for index, value in enumerate(values[keyed:]):
                    total[index] += value
            _rollups_add(sums)
            changed |= {(key[0], key[1]) for key in sums}


@transaction.atomic
def rollups_rebuild() -> int:
    """Rebuild every rollup row from the usage rows (a repair; passes keep them current)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # Metering and refreshes wait on the deltas until the rebuild commits: a delta is
            # then either in the usage read below (and deleted here) or after it (added later).
            cursor.execute(f"LOCK TABLE {RollupDelta._meta.db_table} IN EXCLUSIVE MODE")
        cursor.execute(f"DELETE FROM {RollupDelta._meta.db_table}")  # noqa: S608 - our own table
        cursor.execute(f"DELETE FROM {DailyRollup._meta.db_table}")  # noqa: S608 - our own table
    _rollup_insert()
    count = DailyRollup.objects.count()
    audit_record_system(name="rollups_rebuild", action="rebuild", summary={"rows": count})
    return count
