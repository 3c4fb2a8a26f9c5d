from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "People and projects"

    def ready(self) -> None:
        from portal.celery import ensure_broker_folders

        # Web and worker processes both publish; the filesystem broker's folders must exist.
        ensure_broker_folders()
