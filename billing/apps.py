from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "billing"
    verbose_name = "Costs and budgets"

    def ready(self) -> None:
        from audit import registry
        from billing import metrics, panels
        from billing.selectors.budgets import host_rate_per_hour
        from billing.services import budgets, metering, prices

        # What instances and portal ask of billing (audit/registry.py declares the stores and
        # the order their pieces run in: the budget check after the quota check).
        registry.ADMISSION_CHECKS.register("budget", budgets.budget_check)
        registry.ORDER_HEADROOM.register("budget", budgets.budget_headroom)
        registry.DASHBOARD_PANELS.register("budget", panels.budget_panel)
        registry.DASHBOARD_PANELS.register("spend", panels.spend_panel)
        registry.METRICS_COLLECTORS.register("billing", metrics.collect)
        # The catalog's writers announce a new list price: billing keeps the price history.
        registry.PRICE_CHANGED.register("price_history", prices.list_price_record)
        # What a host has cost is billing's rule (the same computation that makes the bill).
        registry.INSTANCE_COST.register(metering.costs_so_far)
        registry.INSTANCE_RATE.register(host_rate_per_hour)
        registry.INSTANCE_COST_NOTES.register(metering.cost_notes)
