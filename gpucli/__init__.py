"""gpu: the portal's command-line tool. It talks only to the public REST API (/api/v1/) with a
personal token, and imports nothing of Django or of the portal's apps, so it installs on a
laptop with the project's ``cli`` extra (tests/test_layout.py holds it to that)."""

from __future__ import annotations

from importlib import metadata

try:
    __version__ = metadata.version("gpu-portal")
except metadata.PackageNotFoundError:  # run from a checkout that was never installed
    __version__ = "0+checkout"

# The API version this CLI was written against (the portal sends its own in API-Version).
API_VERSION = "1.0.0"
