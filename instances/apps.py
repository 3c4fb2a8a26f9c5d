from django.apps import AppConfig


class InstancesConfig(AppConfig):
    name = "instances"
    verbose_name = "Catalog and hosts"

    def ready(self) -> None:
        # Register the tasks in every process (web included): services send them by name.
        from audit import registry
        from instances import metrics, panels, tasks  # noqa: F401
        from instances.services import quotas
        from instances.services.pools.checks import pools_isolation_check

        # What portal and the order flow ask of instances (audit/registry.py declares the
        # stores and the order their pieces run in).
        registry.ADMISSION_CHECKS.register("quota", quotas.quota_check)
        registry.ORDER_HEADROOM.register("quota", quotas.quota_headroom)
        registry.ISOLATION_CHECKS.register("pools", pools_isolation_check)
        for name in ("operations", "summary", "quota", "hosts", "pools"):
            registry.DASHBOARD_PANELS.register(name, getattr(panels, f"{name}_panel"))
        registry.METRICS_COLLECTORS.register("hosts", metrics.collect_hosts)
        registry.METRICS_COLLECTORS.register("pools", metrics.collect_pools)
