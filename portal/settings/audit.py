"""The audit log: its middleware, who reads it, the signing key, sealing, retention, export."""

from __future__ import annotations

from portal.env import env_bool, env_int, env_required, env_str
from portal.settings.base import (
    CELERY_BEAT_SCHEDULE,
    DATABASES,
    DEBUG,
    MIDDLEWARE,
    PRODUCTION_NEEDS,
    VAR_DIR,
)

# --- Audit log (issue 5) -------------------------------------------------------------------
# First in the chain so it sees every answer, including other middleware's refusals.
MIDDLEWARE.insert(0, "audit.middleware.AuditMiddleware")
# Off only to measure what audit costs (make bench); read on every request.
PORTAL_AUDIT_ENABLED = env_bool("PORTAL_AUDIT_ENABLED", True)
# Who reads the whole log (everyone reads their own activity): callable(user) -> bool.
AUDIT_LOG_READER = "portal.permissions.can_read_audit_log"
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Audit makes every API read a write. SQLite's default journal syncs the disk on every
    # commit (~1 ms here); in WAL mode with synchronous=NORMAL a commit is durable against a
    # crash of the portal and only the last commits can be lost to a power cut, which suits
    # the embedded default (production runs PostgreSQL). WAL also lets readers run alongside
    # the writer, which web, worker and beat sharing one file need.
    DATABASES["default"]["OPTIONS"]["init_command"] = (
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL"
    )
# Safe requests under these paths are audited too; unsafe requests are audited everywhere.
PORTAL_AUDIT_PATH_PREFIXES = ["/api/", "/admin/", "/audit/"]
# ... except these, which serve code rather than data (the admin's JavaScript catalog).
PORTAL_AUDIT_QUIET_PATHS = ["/admin/jsi18n/"]
# Signs the chain's checkpoints (HMAC-SHA256). Not SECRET_KEY: rotating one must not touch
# the other, and whoever can read one need not be able to forge the other.
AUDIT_SIGNING_KEY_MIN_BYTES = 32
if DEBUG:
    PORTAL_AUDIT_SIGNING_KEY = (
        env_str("PORTAL_AUDIT_SIGNING_KEY") or "dev-only-audit-signing-key-never-use-in-production"
    )
else:
    PORTAL_AUDIT_SIGNING_KEY = env_required("PORTAL_AUDIT_SIGNING_KEY", when=PRODUCTION_NEEDS)
    # HMAC-SHA256 takes any key, but a short one can be guessed, and with it every checkpoint
    # forged: refuse to start rather than sign with it. 32 bytes is SHA-256's own output size.
    if len(PORTAL_AUDIT_SIGNING_KEY.encode("utf-8")) < AUDIT_SIGNING_KEY_MIN_BYTES:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            f"PORTAL_AUDIT_SIGNING_KEY is {len(PORTAL_AUDIT_SIGNING_KEY.encode('utf-8'))} bytes; "
            f"it must be at least {AUDIT_SIGNING_KEY_MIN_BYTES} bytes when DJANGO_DEBUG=0. "
            "Make one with: python3 -c 'import secrets; print(secrets.token_urlsafe(50))'"
        )
PORTAL_AUDIT_SEAL_SECONDS = env_int("PORTAL_AUDIT_SEAL_SECONDS", 300)
PORTAL_AUDIT_RETENTION_DAYS = env_int("PORTAL_AUDIT_RETENTION_DAYS", 400)
PORTAL_AUDIT_S3_BUCKET = env_str("PORTAL_AUDIT_S3_BUCKET")
PORTAL_AUDIT_S3_PREFIX = env_str("PORTAL_AUDIT_S3_PREFIX", "audit/")
PORTAL_AUDIT_S3_ENDPOINT_URL = env_str("PORTAL_AUDIT_S3_ENDPOINT_URL")
# Where every signed checkpoint is appended once committed, one JSON document a line, for
# audit_verify to compare the chain with: the database cannot witness its own tail, so put it
# where the database's owner cannot rewrite it (another machine's disk, an append-only mount).
PORTAL_AUDIT_WITNESS_PATH = env_str(
    "PORTAL_AUDIT_WITNESS_PATH", str(VAR_DIR / "audit-witness.jsonl")
)
# How many reverse proxies of ours stand in front of the portal; X-Forwarded-For is believed
# only that far, so a client cannot choose the source address recorded for it.
PORTAL_TRUSTED_PROXIES = env_int("PORTAL_TRUSTED_PROXIES", 0)
CELERY_BEAT_SCHEDULE.update(
    {
        "audit-seal": {
            "task": "audit.tasks.seal_audit_chain",
            "schedule": PORTAL_AUDIT_SEAL_SECONDS,
        },
        "audit-export": {"task": "audit.tasks.export_audit_log", "schedule": 3600},
        "audit-retention": {"task": "audit.tasks.apply_audit_retention", "schedule": 86400},
    }
)
# --- end of audit settings -------------------------------------------------------------------
