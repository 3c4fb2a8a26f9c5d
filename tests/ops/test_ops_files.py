"""The operator's files parse and agree with the code: compose profiles, Prometheus, Grafana."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from django.core.management import get_commands

from portal import metrics

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
DASHBOARD = json.loads((ROOT / "deploy/grafana/dashboards/portal.json").read_text())


def defined_metrics() -> set[str]:
    names = set(metrics.SCRAPE_METRICS)
    for value in vars(metrics).values():
        describe = getattr(value, "describe", None)
        if callable(describe) and hasattr(value, "_name"):
            names.add(value._name)
    return names


def test_every_dashboard_query_uses_a_metric_the_portal_exports():
    known = defined_metrics()
    used = set()
    for panel in DASHBOARD["panels"]:
        assert panel["targets"], f"{panel['title']} has no query"
        for target in panel["targets"]:
            for name in re.findall(r"\bportal_[a-z_]+", target["expr"]):
                used.add(re.sub(r"_(bucket|total|count|sum)$", "", name))
    unknown = used - known
    assert not unknown, f"the dashboard queries metrics nobody exports: {sorted(unknown)}"
    # Every figure the issue names is on the dashboard.
    for name in (
        "portal_hosts",
        "portal_provisioning_seconds",
        "portal_orders",
        "portal_celery_queue_length",
        "portal_beat_last_run_age_seconds",
        "portal_metering_lag_seconds",
        "portal_audit_seal_lag_seconds",
        "portal_cloud_calls",
        "portal_cloud_errors",
        "portal_reconcile_actions",
        "portal_reconcile_duration_seconds",
        "portal_http_requests",
        "portal_http_request_duration_seconds",
        "portal_pool_hosts",
        "portal_pool_desired_hosts",
        "portal_pool_refusal_streak",
        "portal_autoscaler_hosts",
        "portal_autoscaler_refusals",
        "portal_autoscaler_pass_duration_seconds",
    ):
        assert name in used, f"{name} is not on the dashboard"


def test_grafana_is_provisioned_with_the_dashboard_and_the_prometheus_datasource():
    provisioning = ROOT / "deploy/grafana/provisioning"
    source = yaml.safe_load((provisioning / "datasources/prometheus.yml").read_text())
    uid = source["datasources"][0]["uid"]
    assert source["datasources"][0]["url"] == "http://prometheus:9090"
    for panel in DASHBOARD["panels"]:
        assert panel["datasource"]["uid"] == uid
    provider = yaml.safe_load((provisioning / "dashboards/portal.yml").read_text())
    path = provider["providers"][0]["options"]["path"]
    mounts = SERVICES["grafana"]["volumes"]
    assert f"./deploy/grafana/dashboards:{path}:ro" in mounts


def test_prometheus_scrapes_the_portal_with_the_token_from_a_secret():
    config = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    (job,) = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    assert job["static_configs"][0]["targets"] == ["web:8000"]
    assert job["authorization"]["credentials_file"] == "/run/secrets/metrics_token"
    assert "metrics_token" in SERVICES["prometheus"]["secrets"]
    assert COMPOSE["secrets"]["metrics_token"]["environment"] == "PORTAL_METRICS_TOKEN"


def test_monitoring_and_flower_are_off_by_default():
    for name in ("prometheus", "grafana"):
        assert SERVICES[name]["profiles"] == ["monitoring"]
    assert SERVICES["flower"]["profiles"] == ["flower"]
    assert "FLOWER_BASIC_AUTH" in " ".join(SERVICES["flower"]["command"])
    for name in ("flower", "prometheus", "grafana"):
        assert all(port.startswith("127.0.0.1:") for port in SERVICES[name]["ports"])


def test_worker_and_beat_have_health_checks_of_their_own():
    assert "inspect ping" in " ".join(SERVICES["worker"]["healthcheck"]["test"])
    beat = SERVICES["beat"]["healthcheck"]["test"]
    assert beat[1:3] == ["python", "manage.py"]
    assert beat[3] in get_commands()


def test_web_and_workers_share_one_metrics_folder():
    for name in ("web", "worker"):
        env = SERVICES[name]["environment"]
        assert env["PROMETHEUS_MULTIPROC_DIR"] == "/app/var/metrics"
        assert "metrics:/app/var/metrics" in SERVICES[name]["volumes"]
