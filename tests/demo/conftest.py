"""seed_demo runs on a fresh database, as on make run's first start: without the catalog the
other tests' databases hold from the start (tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _fresh_database(request):
    if request.node.get_closest_marker("django_db") or "db" in request.fixturenames:
        request.getfixturevalue("empty_catalog")
