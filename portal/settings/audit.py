"""The audit log: its middleware, who reads it, the signing key, sealing, retention, export."""

from __future__ import annotations

from portal.lib.env import env_bool, env_int, env_required, env_str
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
PORTAL_AUDIT_ENABLED = env_bool(
    "PORTAL_AUDIT_ENABLED",
    True,
    help="0 turns the audit log off; only to measure what it costs (make bench).",
)
# Who reads the whole log (everyone reads their own activity) is asked as the Django permission
# audit.view_auditevent, answered by portal.lib.backends.RoleBackend (base:
# AUTHENTICATION_BACKENDS).
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
PORTAL_AUDIT_PATH_PREFIXES = ["/api/", "/admin/", "/audit/", "/tensorboard/", "/oidc/", "/sso/"]
# ... except these, which serve code rather than data (the admin's JavaScript catalog).
PORTAL_AUDIT_QUIET_PATHS = ["/admin/jsi18n/"]
# Pages whose opening is audited though they are read with GET (regular expressions matched
# against the whole path): a host's JupyterLab opened, or a document in it; not the many API
# and asset reads the open lab makes, which its kernels' and files' own calls stand for.
# jupyterlab_server serves the lab at /lab and /doc (one document), each optionally under
# /workspaces/<name> and /tree/<path>.
PORTAL_AUDIT_PAGES = [
    r"/notebook/[0-9a-f-]{36}/(?:lab|doc)(?:/workspaces/[^/]+)?(?:/tree/.*)?/?",
]
# Signs the chain's checkpoints (HMAC-SHA256). Not SECRET_KEY: rotating one must not touch
# the other, and whoever can read one need not be able to forge the other.
AUDIT_SIGNING_KEY_MIN_BYTES = 32
PORTAL_AUDIT_SIGNING_KEY = env_required(
    "PORTAL_AUDIT_SIGNING_KEY",
    when=PRODUCTION_NEEDS,
    help="Signs the audit chain's checkpoints (HMAC-SHA256); not DJANGO_SECRET_KEY. In "
    "production it must be at least 32 bytes (a shorter key is refused at start); in "
    "development a fixed key stands in. Make one with python3 -c 'import secrets; "
    "print(secrets.token_urlsafe(50))'.",
    fallback="dev-only-audit-signing-key-never-use-in-production" if DEBUG else None,
)
# HMAC-SHA256 takes any key, but a short one can be guessed, and with it every checkpoint
# forged: refuse to start rather than sign with it. 32 bytes is SHA-256's own output size.
if not DEBUG and len(PORTAL_AUDIT_SIGNING_KEY.encode("utf-8")) < AUDIT_SIGNING_KEY_MIN_BYTES:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        f"PORTAL_AUDIT_SIGNING_KEY is {len(PORTAL_AUDIT_SIGNING_KEY.encode('utf-8'))} bytes; "
        f"it must be at least {AUDIT_SIGNING_KEY_MIN_BYTES} bytes when DJANGO_DEBUG=0. "
        "Make one with: python3 -c 'import secrets; print(secrets.token_urlsafe(50))'"
    )
PORTAL_AUDIT_SEAL_SECONDS = env_int(
    "PORTAL_AUDIT_SEAL_SECONDS",
    300,
    help="Seconds between seals of the hash chain; each seal signs a checkpoint, also for a "
    "period with no calls.",
)
PORTAL_AUDIT_RETENTION_DAYS = env_int(
    "PORTAL_AUDIT_RETENTION_DAYS",
    400,
    help="Days audit rows are kept; older sealed periods are deleted whole, oldest first "
    "(0 keeps everything).",
)
PORTAL_AUDIT_S3_BUCKET = env_str(
    "PORTAL_AUDIT_S3_BUCKET",
    help="S3 bucket every sealed period is exported to each hour; empty turns export off.",
)
PORTAL_AUDIT_S3_PREFIX = env_str(
    "PORTAL_AUDIT_S3_PREFIX", "audit/", help="Key prefix of the audit export."
)
PORTAL_AUDIT_S3_ENDPOINT_URL = env_str(
    "PORTAL_AUDIT_S3_ENDPOINT_URL",
    help="Another S3 endpoint for the export (MinIO, moto); empty means AWS itself.",
)
# Where every signed checkpoint is appended once committed, one JSON document a line, for
# audit_verify to compare the chain with: the database cannot witness its own tail, so put it
# where the database's owner cannot rewrite it (another machine's disk, an append-only mount).
PORTAL_AUDIT_WITNESS_PATH = env_str(
    "PORTAL_AUDIT_WITNESS_PATH",
    str(VAR_DIR / "audit-witness.jsonl"),
    help="File every committed audit checkpoint is appended to (one JSON line each), which "
    "audit_verify compares the chain with. Put it where the database's owner cannot write; "
    "empty: the log stream only.",
)
# X-Forwarded-For is believed only as far as PORTAL_TRUSTED_PROXIES (base) says.
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
