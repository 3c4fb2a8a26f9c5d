from django.apps import AppConfig


class InstancesConfig(AppConfig):
    name = "instances"
    verbose_name = "Catalog and hosts"

    def ready(self) -> None:
        # Register the tasks in every process (web included): services send them by name.
        from instances import tasks  # noqa: F401
