"""Billing pages; the API viewsets are registered on the router in portal/urls.py."""

from django.urls import path

from billing.views import budgets, cur, reports

urlpatterns = [
    path("costs/", reports.costs, name="costs"),
    path("costs/export.csv", reports.costs_csv, name="costs-csv"),
    path("costs/reconciliation/", cur.reconciliation, name="reconciliation"),
    path("costs/reconciliation.csv", cur.reconciliation_csv, name="reconciliation-csv"),
    path("budgets/", budgets.budgets, name="budgets"),
]
