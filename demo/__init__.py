"""The demo: ``manage.py seed_demo`` fills the portal with people, projects, a catalog, quotas
and budgets. Listed last in INSTALLED_APPS because it may import every app; no app imports it."""
