"""docs/settings.md is generated from the settings registry (portal/lib/env.py), never kept by hand.

Every reader takes a description (``help=``); ``manage.py settings_doc`` writes the page from
the registry, and the page fails here the moment a setting is added, removed or re-described
without running it again.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError

from portal.lib import env
from portal.management.commands.settings_doc import COMMAND, render

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "settings.md"
READERS = {"env_str", "env_bool", "env_int", "env_float", "env_list", "env_required"}


def test_docs_settings_md_is_what_the_command_writes():
    assert DOC.exists(), f"docs/settings.md is missing: run `{COMMAND}`"
    assert DOC.read_text() == render(), f"docs/settings.md is stale: run `{COMMAND}` and commit it"


def test_every_variable_settings_read_is_on_the_page_once():
    text = DOC.read_text()
    for name in env.READ:
        assert text.count(f"| `{name}` |") == 1, name


def _reader_calls():
    for path in sorted((ROOT / "portal" / "settings").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in READERS:
                yield path.relative_to(ROOT), node


def test_every_reader_call_in_the_settings_says_what_its_variable_does():
    calls = list(_reader_calls())
    assert len(calls) >= len(env.READ)
    missing = []
    for path, call in calls:
        given = {keyword.arg: keyword.value for keyword in call.keywords}
        text = ast.literal_eval(given["help"]) if "help" in given else ""
        if not str(text).strip():
            missing.append(f"{path}:{call.lineno} {ast.unparse(call.args[0])}")
    assert not missing, f"reader calls without help=: {missing}"


def test_a_reader_refuses_a_setting_without_a_description():
    with pytest.raises(TypeError):
        env.env_str("PORTAL_TEST_UNDESCRIBED")  # help= is a required keyword
    with pytest.raises(ImproperlyConfigured, match="needs help="):
        env.env_int("PORTAL_TEST_UNDESCRIBED", 1, help="  ")
    assert "PORTAL_TEST_UNDESCRIBED" not in env.SETTINGS


def test_one_variable_read_twice_must_agree():
    known = env.SETTINGS["PORTAL_REGION"]
    env.env_str("PORTAL_REGION", known.default, help="read again, as a reload would")
    assert env.SETTINGS["PORTAL_REGION"] == known
    with pytest.raises(ImproperlyConfigured, match="read twice"):
        env.env_str("PORTAL_REGION", "eu-west-1", help="another default")


def test_the_registry_records_type_default_and_module():
    assert env.SETTINGS["DJANGO_DEBUG"].kind == "bool"
    assert env.SETTINGS["DJANGO_DEBUG"].default == "0"
    assert env.SETTINGS["PORTAL_RECONCILE_SECONDS"].module == "portal.settings.instances"
    assert env.SETTINGS["PORTAL_METER_SECONDS"].module == "portal.settings.billing"
    assert env.SETTINGS["DJANGO_SECRET_KEY"].required.startswith("when DJANGO_DEBUG=0")


def test_the_command_writes_the_page_and_checks_it(tmp_path):
    target = tmp_path / "settings.md"
    call_command("settings_doc", output=str(target), stdout=open("/dev/null", "w"))  # noqa: SIM115
    assert target.read_text() == render()
    call_command("settings_doc", output=str(target), check=True, stdout=open("/dev/null", "w"))  # noqa: SIM115
    target.write_text("stale")
    with pytest.raises(CommandError, match="stale"):
        call_command("settings_doc", output=str(target), check=True)
