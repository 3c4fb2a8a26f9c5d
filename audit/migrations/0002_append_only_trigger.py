"""On PostgreSQL, make the audit tables append-only in the database itself.

A trigger refuses UPDATE, DELETE and TRUNCATE on the evidence tables, whatever code (or SQL
console) tries them. Two doors stay open, each only for the transaction that opens it:

* ``SET LOCAL portal.audit_retention = 'on'`` lets DELETE through; only the retention service
  (``audit.services.audit_retention_apply``) sets it, and only to remove whole sealed periods.
* ``portal.audit_allow_truncate = 'on'`` lets TRUNCATE through. Nothing in the portal sets it.
  Databases created by Django's test runner get it as their default, because a transactional
  test empties every table with one TRUNCATE afterwards; the trigger test switches it back off.

The trigger stops mistakes and application bugs, not the database's owner: a superuser can
drop it. What catches the owner is the hash chain, the signed checkpoints and the S3 copy.
SQLite has no equivalent and gets no trigger.
"""

from django.db import migrations

TABLES = ["audit_event", "audit_chain_link", "audit_checkpoint", "audit_prune"]

FUNCTION = """
CREATE OR REPLACE FUNCTION audit_refuse_change() RETURNS trigger AS $$
BEGIN
    -- Look at the operation first: a statement-level TRUNCATE trigger has no OLD row.
    IF TG_OP = 'TRUNCATE' THEN
        IF current_setting('portal.audit_allow_truncate', true) = 'on' THEN
            RETURN NULL;
        END IF;
    ELSIF TG_OP = 'DELETE' THEN
        IF current_setting('portal.audit_retention', true) = 'on' THEN
            RETURN OLD;
        END IF;
    END IF;
    RAISE EXCEPTION 'the audit log is append-only: % on % refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'Only the retention command deletes, and only whole sealed periods.';
END;
$$ LANGUAGE plpgsql;
"""

TRIGGERS = """
CREATE TRIGGER {table}_append_only
    BEFORE UPDATE OR DELETE ON {table}
    FOR EACH ROW EXECUTE FUNCTION audit_refuse_change();
CREATE TRIGGER {table}_no_truncate
    BEFORE TRUNCATE ON {table}
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change();
"""

DROP = """
DROP TRIGGER IF EXISTS {table}_append_only ON {table};
DROP TRIGGER IF EXISTS {table}_no_truncate ON {table};
"""


def _under_test_runner() -> bool:
    from django.core import mail

    # setup_test_environment() (Django's runner, pytest-django, make bench) installs the
    # in-memory outbox; a real migrate never has it.
    return hasattr(mail, "outbox")


def install(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    # params=None: the SQL holds plpgsql's own % placeholders, not the driver's.
    schema_editor.execute(FUNCTION, params=None)
    for table in TABLES:
        schema_editor.execute(TRIGGERS.format(table=table), params=None)
    if _under_test_runner():
        schema_editor.execute(
            "DO $$ BEGIN EXECUTE format("
            "'ALTER DATABASE %I SET portal.audit_allow_truncate = ''on''', current_database()"
            "); END $$;",
            params=None,
        )
        # The default applies to new connections; this one needs it too.
        schema_editor.execute("SET portal.audit_allow_truncate = 'on'", params=None)


def remove(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in TABLES:
        schema_editor.execute(DROP.format(table=table), params=None)
    schema_editor.execute("DROP FUNCTION IF EXISTS audit_refuse_change()", params=None)


class Migration(migrations.Migration):
    dependencies = [("audit", "0001_initial")]

    operations = [migrations.RunPython(install, remove, elidable=False)]
