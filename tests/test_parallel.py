"""The services each pytest-xdist worker gets (tests/parallel.py)."""

from tests.parallel import own_services


def test_each_worker_gets_its_own_redis_number_and_var_folder():
    environ = {
        "PYTEST_XDIST_WORKER": "gw2",
        "CELERY_BROKER_URL": "redis://127.0.0.1:6379/15",
        "PORTAL_CACHE_URL": "redis://127.0.0.1:6379/15",
        "PORTAL_VAR_DIR": "/srv/var",
    }
    own_services(environ)
    assert environ["CELERY_BROKER_URL"] == "redis://127.0.0.1:6379/2"
    assert environ["PORTAL_CACHE_URL"] == "redis://127.0.0.1:6379/2"
    assert environ["PORTAL_VAR_DIR"] == "/srv/var/test-gw2"


def test_a_process_a_test_starts_keeps_its_workers_numbers():
    # A Celery worker or server started by a test inherits the environment, worker name
    # included, and imports tests/parallel.py again: it must land on the same Redis database
    # as the test that queues its tasks, not the next one.
    environ = {"PYTEST_XDIST_WORKER": "gw0", "CELERY_BROKER_URL": "redis://h:6379/15"}
    own_services(environ)
    first = dict(environ)
    own_services(environ)
    assert environ == first
    assert environ["CELERY_BROKER_URL"] == "redis://h:6379/0"


def test_without_xdist_nothing_changes():
    environ = {"CELERY_BROKER_URL": "redis://h:6379/15"}
    own_services(environ)
    assert environ == {"CELERY_BROKER_URL": "redis://h:6379/15"}
