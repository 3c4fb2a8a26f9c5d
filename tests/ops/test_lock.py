"""The lock files are in step with pyproject.toml: every dependency it names is pinned there,
at a version its specifier allows (refresh with `make lock`)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;]+)")


def pins(name: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in (ROOT / name).read_text().splitlines():
        match = PIN.match(line)
        if match:
            found.setdefault(canonicalize_name(match[1]), []).append(match[2])
    return found


def requirements(*groups: list[str]) -> list[Requirement]:
    return [Requirement(text) for group in groups for text in group]


@pytest.mark.parametrize(
    ("lock", "wanted"),
    [
        ("requirements.lock", requirements(PROJECT["dependencies"])),
        (
            "requirements-dev.lock",
            requirements(
                PROJECT["dependencies"],
                PROJECT["optional-dependencies"]["dev"],
                PROJECT["optional-dependencies"]["cli"],  # the checkout has the gpu command
            ),
        ),
    ],
)
def test_every_dependency_of_pyproject_is_pinned_in_the_lock(lock, wanted):
    pinned = pins(lock)
    missing, outside = [], []
    for requirement in wanted:
        versions = pinned.get(canonicalize_name(requirement.name))
        if not versions:
            missing.append(requirement.name)
        elif not any(requirement.specifier.contains(v, prereleases=True) for v in versions):
            outside.append(f"{requirement} (locked {', '.join(versions)})")
    assert not missing, f"{lock} lacks {missing}: run make lock"
    assert not outside, f"{lock} pins versions pyproject.toml no longer allows: {outside}"


def test_the_image_and_the_checkout_install_from_the_locks():
    assert "pip install --no-cache-dir -r requirements.lock" in (ROOT / "Dockerfile").read_text()
    makefile = (ROOT / "Makefile").read_text()
    assert "pip install --quiet -r requirements-dev.lock" in makefile
    assert "make install" in (ROOT / ".ci/run").read_text()
