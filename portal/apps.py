from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "People and projects"

    def ready(self) -> None:
        from portal import celery_ops  # noqa: F401 - connects the task and beat receivers
        from portal.celery import ensure_broker_folders

        # Web and worker processes both publish; the filesystem broker's folders must exist.
        ensure_broker_folders()
