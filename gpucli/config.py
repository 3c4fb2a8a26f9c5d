"""Where gpu keeps the portal's address and the personal token: one JSON file in the user's
config folder ($XDG_CONFIG_HOME/gpu-portal/, else ~/.config/gpu-portal/), folder 700 and file
600, written whole and then renamed so a reader never sees half of it. GPU_PORTAL_URL and
GPU_PORTAL_TOKEN override the file (scripts and CI)."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

URL_VARIABLE = "GPU_PORTAL_URL"
TOKEN_VARIABLE = "GPU_PORTAL_TOKEN"  # noqa: S105 - the variable's name, not a secret
PROJECT_VARIABLE = "GPU_PORTAL_PROJECT"
TOKEN_PREFIX = "gpp_"  # noqa: S105 - the portal's public marker of its tokens


def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpu-portal"


def config_file() -> Path:
    return config_dir() / "config.json"


@dataclass(frozen=True)
class Settings:
    """The portal to talk to and the token to send (either may be missing before login)."""

    url: str | None
    token: str | None = None
    project: str | None = None

    def __repr__(self) -> str:
        # Never the token, whatever prints this object.
        return f"Settings(url={self.url!r}, token={'set' if self.token else None})"


def read_file() -> dict:
    try:
        data = json.loads(config_file().read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def load() -> Settings:
    """The file, then the environment over it."""
    stored = read_file()
    url = os.environ.get(URL_VARIABLE) or stored.get("url")
    token = os.environ.get(TOKEN_VARIABLE) or stored.get("token")
    project = os.environ.get(PROJECT_VARIABLE) or stored.get("project")
    return Settings(url=url.rstrip("/") if url else None, token=token or None, project=project)


def save(*, url: str, token: str | None) -> Path:
    """Write the file with mode 600 in a folder of mode 700 (both fixed if they were looser)."""
    folder = config_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)
    body = {**read_file(), "url": url}
    if token:
        body["token"] = token
    else:
        body.pop("token", None)
    # mkstemp creates the file 600 from the start: the token is never readable by others,
    # not even between the write and the chmod.
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".config-", suffix=".json")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(body, out, indent=2)
            out.write("\n")
        os.chmod(temporary, 0o600)
        os.replace(temporary, config_file())
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return config_file()
