from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = "Audit log"

    def ready(self):
        from audit import logredact, signals  # noqa: F401 - connects the receivers

        logredact.install()
