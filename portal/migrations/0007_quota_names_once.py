"""Keep each name once in the quotas' and approval policies' type lists already stored (one
quota held 60,000 copies of g5.xlarge); quota_set and approval_policy_set keep them so from
now on. The quota history is left as it was recorded."""

from django.db import migrations


def names_once(apps, schema_editor):
    Quota = apps.get_model("portal", "Quota")
    ApprovalPolicy = apps.get_model("portal", "ApprovalPolicy")
    for model, field in ((Quota, "allowed_instance_types"), (ApprovalPolicy, "instance_types")):
        for row in model.objects.only("pk", field).iterator():
            names = getattr(row, field)
            if (
                isinstance(names, list)
                and all(isinstance(name, str) for name in names)
                and len(set(names)) != len(names)
            ):
                model.objects.filter(pk=row.pk).update(**{field: list(dict.fromkeys(names))})


class Migration(migrations.Migration):
    dependencies = [("portal", "0006_quota_request_notice_topic")]

    operations = [migrations.RunPython(names_once, migrations.RunPython.noop)]
