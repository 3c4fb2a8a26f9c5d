"""gpu: the portal's command-line tool. It talks only to the public REST API (/api/v1/) with a
personal token, and imports nothing of Django or of the portal's apps, so it installs on a
laptop with the project's ``cli`` extra (tests/test_layout.py holds it to that)."""

from __future__ import annotations

from functools import cache

# The API version this CLI was written against (the portal sends its own in API-Version).
API_VERSION = "1.0.0"


@cache
def version() -> str:
    """The installed project's version (importlib.metadata costs a tenth of a second at start,
    so only the calls that send or print it pay it)."""
    from importlib import metadata

    try:
        return metadata.version("gpu-portal")
    except metadata.PackageNotFoundError:  # a checkout that was never installed
        return "0+checkout"
