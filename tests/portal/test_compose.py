"""docker-compose.yml: every command points at a real entry point; its env is what settings read."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import yaml
from celery import Celery
from django.core.management import get_commands

from portal.lib import env

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
APP_SERVICES = [name for name, spec in SERVICES.items() if spec.get("build")]


def check_entry_point(command: list[str]) -> None:
    program = command[0]
    if program in ("gunicorn", "uvicorn"):
        module, _, attribute = command[1].partition(":")
        application = getattr(importlib.import_module(module), attribute)
        assert callable(application)
    elif program == "celery":
        app_module = command[command.index("-A") + 1]
        assert isinstance(importlib.import_module(app_module).celery_app, Celery)
        assert command[command.index("-A") + 2] in {"worker", "beat"}
    elif program == "python" and command[1] == "manage.py":
        assert command[2] in get_commands(), f"no management command {command[2]}"
        assert (ROOT / "manage.py").exists()
    else:
        pytest.fail(f"unknown entry point {command}")


def test_compose_has_the_production_services():
    assert {"postgres", "redis", "web", "worker", "beat"} <= set(SERVICES)
    assert "pgdata:/var/lib/postgresql/data" in SERVICES["postgres"]["volumes"]
    for name in ("postgres", "redis", "web", "worker"):
        assert "healthcheck" in SERVICES[name], f"{name} has no health check"
    assert "/health/" in " ".join(SERVICES["web"]["healthcheck"]["test"])


def test_all_app_services_share_one_image_built_from_the_dockerfile():
    assert {SERVICES[name]["image"] for name in APP_SERVICES} == {"gpu-portal:latest"}
    assert (ROOT / "Dockerfile").exists()
    assert {"web", "worker", "beat", "migrate"} <= set(APP_SERVICES)


@pytest.mark.parametrize("service", ["web", "worker", "beat", "migrate"])
def test_service_command_points_at_a_real_entry_point(service):
    check_entry_point(SERVICES[service]["command"])


@pytest.mark.parametrize("service", ["web", "worker", "beat", "migrate"])
def test_service_environment_is_what_settings_read(service):
    names = set(SERVICES[service]["environment"])
    unknown = sorted(names - env.READ)
    assert not unknown, f"{service} sets variables settings never read: {unknown}"
    assert {"DATABASE_URL", "CELERY_BROKER_URL", "DJANGO_SECRET_KEY"} <= names
    assert SERVICES[service]["environment"]["DATABASE_URL"].startswith("postgres://")
    assert SERVICES[service]["environment"]["CELERY_BROKER_URL"].startswith("redis://")


def test_procfile_runs_web_worker_beat_and_the_banner():
    lines = dict(
        line.split(":", 1) for line in (ROOT / "Procfile").read_text().splitlines() if line
    )
    assert set(lines) == {"web", "worker", "beat", "banner"}
    for command in lines.values():
        words = command.split()
        assert words[0] == "exec"  # the process itself gets honcho's SIGTERM, not a shell
        words = words[1:]
        if words[0] == "python":
            assert words[2] in get_commands()
        else:
            check_entry_point(words)
