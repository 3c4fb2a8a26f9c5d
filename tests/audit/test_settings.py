"""Audit settings: a signing key of its own in production, and no fault switch there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = (
    "import django; from django.conf import settings as s; django.setup(); "
    "print(s.PORTAL_AUDIT_SIGNING_KEY == s.SECRET_KEY, s.PORTAL_AUDIT_ENABLED, "
    "s.PORTAL_TRUSTED_PROXIES, s.MIDDLEWARE[0], s.MIDDLEWARE[-1], "
    "any('Fault' in name for name in s.MIDDLEWARE), hasattr(s, 'PORTAL_FAULT_INJECTION'))"
)


def start(env: dict[str, str], tmp_path) -> subprocess.CompletedProcess:
    clean = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "DATABASE_", "CELERY_", "PORTAL_"))
    }
    clean.update({"DJANGO_SETTINGS_MODULE": "portal.settings", "PORTAL_VAR_DIR": str(tmp_path)})
    clean.update(env)
    return subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )


PRODUCTION = {"DJANGO_DEBUG": "0", "DJANGO_SECRET_KEY": "s" * 50}


def test_production_without_an_audit_signing_key_refuses_to_start_and_names_it(tmp_path):
    result = start(PRODUCTION, tmp_path)
    assert result.returncode != 0
    assert "PORTAL_AUDIT_SIGNING_KEY is not set; it is required when DJANGO_DEBUG=0" in (
        result.stderr
    )


def test_production_signs_with_its_own_key_not_the_secret_key(tmp_path):
    result = start({**PRODUCTION, "PORTAL_AUDIT_SIGNING_KEY": "k" * 50}, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "False",
        "True",
        "0",
        "audit.middleware.AuditMiddleware",
        "axes.middleware.AxesMiddleware",
        "False",
        "False",
    ]


def test_the_fault_switch_is_in_the_test_settings_only(tmp_path, settings):
    production = start({**PRODUCTION, "PORTAL_AUDIT_SIGNING_KEY": "k" * 50}, tmp_path)
    development = start({"DJANGO_DEBUG": "1"}, tmp_path)
    for result in (production, development):
        assert result.returncode == 0, result.stderr
        assert result.stdout.split()[-2:] == ["False", "False"]
    assert settings.MIDDLEWARE[-1] == "tests.faults.FaultInjectionMiddleware"


def test_development_has_a_signing_key_and_reads_the_audit_settings(tmp_path):
    result = start(
        {"DJANGO_DEBUG": "1", "PORTAL_TRUSTED_PROXIES": "2", "PORTAL_AUDIT_ENABLED": "0"}, tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[:3] == ["False", "False", "2"]
