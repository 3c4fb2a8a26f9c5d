from django.apps import AppConfig
from django.db.models.signals import post_save


def _record_list_price(sender, instance, raw=False, **kwargs):
    """A type's list price changed (sync_catalog, the admin): keep it in the price history."""
    if raw:  # loading fixtures
        return
    from billing.prices import list_price_record

    list_price_record(instance_type=instance)


class BillingConfig(AppConfig):
    name = "billing"

    def ready(self) -> None:
        post_save.connect(
            _record_list_price,
            sender="instances.InstanceType",
            dispatch_uid="billing.record_list_price",
        )
