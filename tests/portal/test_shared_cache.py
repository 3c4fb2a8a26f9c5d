"""With PORTAL_CACHE_URL, every web process shares one Redis cache: sessions are read from it
before the database, a sign-out ends the session everywhere, and rate limits count across
processes."""

from __future__ import annotations

import uuid

import pytest
from django.conf import settings
from django.core.cache import caches
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext

from tests.portal.test_settings import run_with_env

pytestmark = [pytest.mark.redis, pytest.mark.django_db]

PROBE = (
    "import json, django; from django.conf import settings as s; django.setup(); "
    "print(json.dumps({'cache': s.CACHES['default'], 'sessions': s.SESSION_ENGINE}))"
)


def test_without_a_cache_url_each_process_caches_for_itself_and_sessions_stay_in_the_db(tmp_path):
    import json

    found = json.loads(
        run_with_env({"PORTAL_VAR_DIR": str(tmp_path), "DJANGO_DEBUG": "1"}, PROBE).stdout
    )
    assert found["cache"]["BACKEND"].endswith("LocMemCache")
    assert found["sessions"] == "django.contrib.sessions.backends.db"


def test_a_cache_url_gives_every_process_redis_and_cached_sessions(tmp_path):
    import json

    env = {
        "PORTAL_VAR_DIR": str(tmp_path),
        "DJANGO_DEBUG": "1",
        "PORTAL_CACHE_URL": "redis://cache.internal:6379/1",
    }
    found = json.loads(run_with_env(env, PROBE).stdout)
    assert found["cache"]["BACKEND"] == "django.core.cache.backends.redis.RedisCache"
    assert found["cache"]["LOCATION"] == "redis://cache.internal:6379/1"
    assert found["sessions"] == "django.contrib.sessions.backends.cached_db"


@pytest.fixture
def shared_cache():
    """The broker's Redis as the shared cache, under a prefix of this test's own."""
    config = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": settings.CELERY_BROKER_URL,
            "KEY_PREFIX": f"test-{uuid.uuid4().hex}",
        }
    }
    with override_settings(
        CACHES=config, SESSION_ENGINE="django.contrib.sessions.backends.cached_db"
    ):
        yield
        caches["default"].clear()
        caches["default"].close()


def test_a_signed_in_request_reads_its_session_from_the_cache_not_the_database(shared_cache, alice):
    client = Client()
    client.force_login(alice)
    assert client.get("/dashboard/").status_code == 200
    with CaptureQueriesContext(connection) as queries:
        assert client.get("/api/v1/projects/").status_code == 200
    assert not [q for q in queries.captured_queries if "django_session" in q["sql"]]


def test_signing_out_ends_the_session_for_every_process(shared_cache, alice):
    browser = Client()
    browser.force_login(alice)
    cookie = browser.cookies[settings.SESSION_COOKIE_NAME].value
    browser.post("/logout/")
    # Another web process sharing the cache and the database, presented the old cookie.
    other = Client()
    other.cookies[settings.SESSION_COOKIE_NAME] = cookie
    assert other.get("/api/v1/projects/").status_code in (401, 403)
