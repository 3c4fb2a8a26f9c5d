"""Billing pages; the API viewsets are registered on the router in portal/urls.py."""

from django.urls import path

from billing import views

urlpatterns = [
    path("costs/", views.costs, name="costs"),
    path("costs/export.csv", views.costs_csv, name="costs-csv"),
    path("costs/reconciliation/", views.reconciliation, name="reconciliation"),
    path("costs/reconciliation.csv", views.reconciliation_csv, name="reconciliation-csv"),
    path("budgets/", views.budgets, name="budgets"),
]
