from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = "Audit log"

    def ready(self):
        from django.core import checks

        from audit import metrics, registry, signals  # noqa: F401 - the receivers
        from audit.lib import logredact

        logredact.install()
        # The wiring between apps (audit/registry.py): audit's own piece, and the check that
        # every declared piece was registered by the app that answers it.
        registry.METRICS_COLLECTORS.register("audit", metrics.collect)
        checks.register(registry.check_wiring)
