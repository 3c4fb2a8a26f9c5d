from axes import apps as axes_apps
from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "People and projects"
    default = True  # this module holds two configs: INSTALLED_APPS' "portal" means this one

    def ready(self) -> None:
        from audit import registry
        from portal import tasks  # noqa: F401 - registered everywhere: services send them by name
        from portal.celery import ensure_broker_folders
        from portal.lib import celery_ops  # connects the task and beat receivers

        # Web and worker processes both publish; the filesystem broker's folders must exist.
        ensure_broker_folders()
        # Scrape-time gauges (audit/registry.py).
        registry.METRICS_COLLECTORS.register("celery_queues", celery_ops.collect_queues)
        registry.METRICS_COLLECTORS.register("celery_beat", celery_ops.collect_beat)


class SignInAttemptsConfig(axes_apps.AppConfig):
    """django-axes under a name admins recognise in the admin's index (its own is "Axes")."""

    verbose_name = "Sign-in attempts"
    default = False
