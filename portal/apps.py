from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "People and projects"

    def ready(self) -> None:
        from audit import registry
        from portal import celery_ops  # connects the task and beat receivers
        from portal.celery import ensure_broker_folders

        # Web and worker processes both publish; the filesystem broker's folders must exist.
        ensure_broker_folders()
        # Scrape-time gauges (audit/registry.py).
        registry.METRICS_COLLECTORS.register("celery_queues", celery_ops.collect_queues)
        registry.METRICS_COLLECTORS.register("celery_beat", celery_ops.collect_beat)
