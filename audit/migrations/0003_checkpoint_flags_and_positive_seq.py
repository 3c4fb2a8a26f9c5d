"""Checkpoints record the commit grace and the rows a seal flagged; PostgreSQL refuses
sequence numbers below 1.

The CHECK constraint is added NOT VALID: it refuses new rows at once without scanning the table,
and a forged row already there stays where ``audit_verify`` reports it (it could not be deleted
anyway: the trigger of migration 0002 refuses). Like that trigger, it stops the application and
ordinary accounts, not the database's owner, who can drop it; the chain's checks catch the
owner. SQLite gets neither.
"""

from django.db import migrations, models

CONSTRAINT = "audit_event_seq_positive"


def add_check(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        f"ALTER TABLE audit_event ADD CONSTRAINT {CONSTRAINT} CHECK (seq > 0) NOT VALID"
    )


def drop_check(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"ALTER TABLE audit_event DROP CONSTRAINT IF EXISTS {CONSTRAINT}")


class Migration(migrations.Migration):
    dependencies = [("audit", "0002_append_only_trigger")]

    operations = [
        migrations.AddField(
            model_name="auditcheckpoint",
            name="flagged_seqs",
            field=models.TextField(blank=True, default=""),
        ),
        migrations.AddField(
            model_name="auditcheckpoint",
            name="grace_seconds",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name="auditcheckpoint",
            index=models.Index(fields=["last_position"], name="audit_checkpoint_last_pos"),
        ),
        migrations.RunPython(add_check, drop_check, elidable=False),
    ]
