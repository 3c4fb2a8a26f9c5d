"""billing/views/: the billing pages, one module per topic: reports (Costs, the finance report,
and its CSV), budgets (Budgets) and cur (reconciliation with the cloud bill, and its CSV). Their
forms are in billing/forms.py; billing/urls.py routes them."""
