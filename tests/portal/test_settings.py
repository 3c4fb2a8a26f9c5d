"""Settings come from the environment, with safe development defaults."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = (
    "import json, django; from django.conf import settings as s; django.setup(); "
    "print(json.dumps({'debug': s.DEBUG, 'engine': s.DATABASES['default']['ENGINE'], "
    "'name': str(s.DATABASES['default']['NAME']), 'broker': s.CELERY_BROKER_URL, "
    "'provider': s.PORTAL_PROVIDER, 'hosts': s.ALLOWED_HOSTS, 'secret': s.SECRET_KEY, "
    "'ssl_redirect': s.SECURE_SSL_REDIRECT, 'storage': s.STORAGES['staticfiles']['BACKEND'], "
    "'transport': s.CELERY_BROKER_TRANSPORT_OPTIONS}))"
)


def run_with_env(env: dict[str, str], code: str = PROBE, *args: str):
    clean = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "DATABASE_", "CELERY_", "PORTAL_"))
    }
    clean.update({"DJANGO_SETTINGS_MODULE": "portal.settings", **env})
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )


def settings_with(env: dict[str, str], tmp_path) -> dict:
    result = run_with_env({"PORTAL_VAR_DIR": str(tmp_path), **env})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_development_defaults_need_no_services(tmp_path):
    found = settings_with({"DJANGO_DEBUG": "1"}, tmp_path)
    assert found["debug"] is True
    assert found["engine"] == "django.db.backends.sqlite3"
    assert found["name"] == str(tmp_path / "portal.sqlite3")
    assert found["broker"] == "filesystem://"
    assert found["transport"]["data_folder_in"] == str(tmp_path / "broker" / "queue")
    assert found["provider"] == "simulated"


def test_every_setting_is_read_from_the_environment(tmp_path):
    found = settings_with(
        {
            "DATABASE_URL": "postgres://portal:pw@db.internal:5433/portal",
            "CELERY_BROKER_URL": "redis://cache.internal:6379/2",
            "PORTAL_PROVIDER": "ec2",
            "DJANGO_SECRET_KEY": "k" * 64,
            "PORTAL_AUDIT_SIGNING_KEY": "a" * 64,
            "DJANGO_DEBUG": "0",
            "DJANGO_ALLOWED_HOSTS": "gpu.example.org, portal.example.org",
        },
        tmp_path,
    )
    assert found["engine"] == "django.db.backends.postgresql"
    assert found["name"] == "portal"
    assert found["broker"] == "redis://cache.internal:6379/2"
    assert found["transport"]["visibility_timeout"] >= 3600
    assert found["provider"] == "ec2"
    assert found["secret"] == "k" * 64
    assert found["debug"] is False
    assert found["hosts"] == ["gpu.example.org", "portal.example.org"]
    assert found["ssl_redirect"] is True
    assert found["storage"] == "whitenoise.storage.CompressedManifestStaticFilesStorage"


def test_a_server_started_without_settings_is_a_production_server(tmp_path):
    result = run_with_env({"PORTAL_VAR_DIR": str(tmp_path)})
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY is not set; it is required when DJANGO_DEBUG=0 (the default" in (
        result.stderr
    )
    found = settings_with(
        {"DJANGO_SECRET_KEY": "k" * 64, "PORTAL_AUDIT_SIGNING_KEY": "a" * 64}, tmp_path
    )
    assert found["debug"] is False
    assert found["ssl_redirect"] is True
    assert found["storage"] == "whitenoise.storage.CompressedManifestStaticFilesStorage"


def test_make_run_turns_debug_on_explicitly():
    makefile = (ROOT / "Makefile").read_text()
    assert "run: export DJANGO_DEBUG ?= 1" in makefile


def test_production_without_a_secret_key_refuses_to_start_and_names_it(tmp_path):
    result = run_with_env({"DJANGO_DEBUG": "0", "PORTAL_VAR_DIR": str(tmp_path)})
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY is not set" in result.stderr


def test_a_malformed_boolean_is_refused_with_its_name(tmp_path):
    result = run_with_env({"DJANGO_DEBUG": "maybe", "PORTAL_VAR_DIR": str(tmp_path)})
    assert result.returncode != 0
    assert "DJANGO_DEBUG must be 1 or 0" in result.stderr


def test_production_settings_pass_the_deploy_checklist(tmp_path):
    code = (
        "import django, sys; django.setup(); from django.core.management import call_command; "
        "call_command('check', deploy=True, fail_level='WARNING')"
    )
    result = run_with_env(
        {
            "DJANGO_DEBUG": "0",
            "DJANGO_SECRET_KEY": "a-long-random-production-secret-" + "x" * 40,
            "PORTAL_AUDIT_SIGNING_KEY": "another-long-random-signing-key-" + "y" * 40,
            "PORTAL_VAR_DIR": str(tmp_path),
        },
        code,
    )
    assert result.returncode == 0, result.stderr
    assert "identified no issues" in result.stdout + result.stderr or not result.stderr.strip()


def test_env_example_documents_every_variable_settings_read():
    from portal.lib import env

    documented = {
        line.split("=", 1)[0].lstrip("# ").strip()
        for line in (ROOT / ".env.example").read_text().splitlines()
        if "=" in line and not line.startswith("##")
    }
    missing = sorted(env.READ - documented)
    assert not missing, f".env.example lacks {missing}"


@pytest.mark.parametrize("name", ["DATABASE_URL", "CELERY_BROKER_URL", "PORTAL_PROVIDER"])
def test_the_settings_page_names_the_main_variables(name):
    assert f"`{name}`" in (ROOT / "docs" / "settings.md").read_text()


PRODUCTION = {
    "DJANGO_DEBUG": "0",
    "DJANGO_SECRET_KEY": "a-long-random-production-secret-" + "x" * 40,
}


@pytest.mark.parametrize(
    "key",
    ["k", "Z" * 31, "é" * 15],  # the last: 15 characters, 30 bytes
    ids=["one character", "31 bytes", "30 bytes of 15 characters"],
)
def test_production_refuses_an_audit_signing_key_shorter_than_32_bytes(key, tmp_path):
    code = "import django; django.setup(); from django.core.management import call_command; "
    code += "call_command('check')"
    result = run_with_env(
        {**PRODUCTION, "PORTAL_AUDIT_SIGNING_KEY": key, "PORTAL_VAR_DIR": str(tmp_path)}, code
    )
    assert result.returncode != 0
    size = len(key.encode())
    assert (
        f"PORTAL_AUDIT_SIGNING_KEY is {size} bytes; it must be at least 32 bytes when "
        "DJANGO_DEBUG=0" in result.stderr
    )
    if len(key) > 1:
        assert key not in result.stderr  # the message never prints the key


@pytest.mark.parametrize("key", ["k" * 32, "é" * 16], ids=["32 bytes", "32 bytes of 16 é"])
def test_production_starts_with_a_32_byte_audit_signing_key(key, tmp_path):
    code = "import django; django.setup(); from django.conf import settings as s; "
    code += "print(len(s.PORTAL_AUDIT_SIGNING_KEY.encode()))"
    result = run_with_env(
        {**PRODUCTION, "PORTAL_AUDIT_SIGNING_KEY": key, "PORTAL_VAR_DIR": str(tmp_path)}, code
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["32"]


def test_development_keeps_accepting_a_short_audit_signing_key(tmp_path):
    code = "import django; django.setup(); from django.conf import settings as s; "
    code += "print(s.PORTAL_AUDIT_SIGNING_KEY)"
    result = run_with_env(
        {"DJANGO_DEBUG": "1", "PORTAL_AUDIT_SIGNING_KEY": "k", "PORTAL_VAR_DIR": str(tmp_path)},
        code,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["k"]


def test_the_docs_and_env_example_state_the_signing_key_rule():
    for document in ("docs/operations.md", "docs/settings.md", ".env.example"):
        text = " ".join((ROOT / document).read_text().split())
        assert "at least 32 bytes" in text, document


KOMBU_PROBE = (
    "import logging, django; django.setup(); "
    "print(logging.getLogger('kombu.connection').getEffectiveLevel())"
)


@pytest.mark.parametrize(
    ("broker", "silenced"), [("filesystem://", True), ("redis://127.0.0.1:6379/9", False)]
)
def test_kombus_no_hostname_warning_is_silenced_only_for_the_folder_broker(
    tmp_path, broker, silenced
):
    env = {"PORTAL_VAR_DIR": str(tmp_path), "DJANGO_DEBUG": "1", "CELERY_BROKER_URL": broker}
    answer = run_with_env(env, KOMBU_PROBE)
    assert answer.returncode == 0, answer.stderr[-2000:]
    level = int(answer.stdout.strip().splitlines()[-1])
    assert (level > logging.WARNING) is silenced


@pytest.mark.postgres
@pytest.mark.django_db
def test_a_query_may_name_70000_ids_on_postgresql():
    """Parameters are bound on the client, as Django binds them by default: with psycopg's
    server-side binding PostgreSQL takes at most 65,535 parameters a query, so a long ``__in``
    list (metering's hosts, the audit chain's rows) would fail, and its prepared statements'
    generic plans made the month's cost report 2.2x slower (tests/bench/bench_billing.py)."""
    from django.contrib.auth import get_user_model

    assert not get_user_model().objects.filter(pk__in=range(1, 70_001)).exists()
