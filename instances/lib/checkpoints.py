"""instances/lib/checkpoints.py: where an order's hosts keep their checkpoints, one durable
location per project and order, handed to every host of the order (replacements included)
through cloud-init. The portal only names the place; it never reads what is kept there."""

from __future__ import annotations

from django.conf import settings

ENV_VAR = "PORTAL_CHECKPOINT_URI"


def checkpoint_uri_for(*, project_slug: str, order_id) -> str:
    """s3://<PORTAL_CHECKPOINT_S3_PREFIX>/<project>/<order>/ when a prefix is set; on the
    simulated cloud a local folder; otherwise none ("")."""
    prefix = settings.PORTAL_CHECKPOINT_S3_PREFIX.rstrip("/")
    if prefix:
        return f"{prefix}/{project_slug}/{order_id}/"
    if settings.PORTAL_PROVIDER == "simulated":
        return f"file://{settings.PORTAL_CHECKPOINT_LOCAL_DIR}/{project_slug}/{order_id}/"
    return ""


def backup_dir(uri: str) -> str:
    """The path TensorFlow's BackupAndRestore takes: an s3:// URI as it is, a file:// one as a
    local path."""
    return uri.removeprefix("file://")


def host_environment(uri: str) -> dict[str, str]:
    """The variables cloud-init sets on a host of an order with this checkpoint location."""
    return {ENV_VAR: uri} if uri else {}
