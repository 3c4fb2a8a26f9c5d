"""Failed sign-ins are throttled per username and address, and the lock lifts by itself."""

from __future__ import annotations

from datetime import timedelta

from axes.models import AccessAttempt
from django.utils import timezone

from tests.conftest import PASSWORD


def fail(client, username="alice", **extra):
    return client.post("/login/", {"username": username, "password": "wrong"}, **extra)


def test_the_sixth_failure_answers_429_with_retry_after(client, alice):
    for _ in range(5):
        assert fail(client).status_code == 200
    response = fail(client)
    assert response.status_code == 429
    assert response["Retry-After"] == "900"
    assert "Too many failed sign-ins" in response.content.decode()
    # Locked: even the right password is refused until the lock lifts.
    locked = client.post("/login/", {"username": "alice", "password": PASSWORD})
    assert locked.status_code == 429


def test_the_lock_lifts_by_itself(client, alice):
    for _ in range(6):
        fail(client)
    AccessAttempt.objects.update(attempt_time=timezone.now() - timedelta(minutes=16))
    response = client.post("/login/", {"username": "alice", "password": PASSWORD})
    assert response.status_code == 302


def test_a_spoofed_forwarded_for_does_not_get_around_it(client, alice):
    for n in range(5):
        fail(client, HTTP_X_FORWARDED_FOR=f"203.0.113.{n}")
    assert fail(client, HTTP_X_FORWARDED_FOR="198.51.100.99").status_code == 429


def test_another_user_from_the_same_address_is_not_locked(client, alice, bob):
    for _ in range(6):
        fail(client)
    assert client.post("/login/", {"username": "bob", "password": PASSWORD}).status_code == 302


def test_the_token_endpoint_counts_failures_too(api, alice):
    for _ in range(5):
        response = api.post(
            "/api/v1/auth/tokens/", {"username": "alice", "password": "x"}, format="json"
        )
        assert response.status_code == 401
    response = api.post(
        "/api/v1/auth/tokens/", {"username": "alice", "password": "x"}, format="json"
    )
    assert response.status_code == 429
    assert response.json()["code"] == "too_many_attempts"
    assert int(response["Retry-After"]) > 0


def test_the_token_endpoint_has_its_own_rate_limit(api, alice, settings):
    from rest_framework.settings import api_settings

    api_settings.DEFAULT_THROTTLE_RATES["auth-token"] = "3/minute"
    try:
        codes = [
            api.post(
                "/api/v1/auth/tokens/", {"username": f"u{n}", "password": "x"}, format="json"
            ).status_code
            for n in range(4)
        ]
    finally:
        api_settings.DEFAULT_THROTTLE_RATES["auth-token"] = "10/minute"
    assert codes == [401, 401, 401, 429]
