from django.db import migrations, models


def to_minutes(apps, schema_editor):
    LeaseNotice = apps.get_model("instances", "LeaseNotice")
    LeaseNotice.objects.update(minutes_before=models.F("minutes_before") * 60)


def to_hours(apps, schema_editor):
    LeaseNotice = apps.get_model("instances", "LeaseNotice")
    LeaseNotice.objects.update(minutes_before=models.F("minutes_before") / 60)


class Migration(migrations.Migration):
    """A short lease's warning comes minutes before its end: warnings are kept in minutes."""

    dependencies = [
        ("instances", "0008_instance_lease_started_at"),
    ]

    operations = [
        migrations.RemoveConstraint(model_name="leasenotice", name="leasenotice_once"),
        migrations.RenameField(
            model_name="leasenotice", old_name="hours_before", new_name="minutes_before"
        ),
        migrations.AlterField(
            model_name="leasenotice",
            name="minutes_before",
            field=models.PositiveIntegerField(),
        ),
        migrations.RunPython(to_minutes, to_hours),
        migrations.AddConstraint(
            model_name="leasenotice",
            constraint=models.UniqueConstraint(
                fields=("instance", "lease_expires_at", "minutes_before"),
                name="leasenotice_once",
            ),
        ),
    ]
