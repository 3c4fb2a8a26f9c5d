"""What gpu does before it reaches a portal: every verb's help with an example, a token on the
command line refused, an unreachable portal and a missing one explained (no traceback), and
the small rules (durations, the API version comparison)."""

from __future__ import annotations

import importlib
import socket
import tomllib

import pytest
import typer
from typer.testing import CliRunner

from gpucli.client import newer_api_warning
from gpucli.main import app
from gpucli.output import hours
from tests.cli.conftest import ROOT

VERBS = [
    ["login"],
    ["whoami"],
    ["logout"],
    ["types"],
    ["images"],
    ["order"],
    ["hosts"],
    ["host"],
    ["stop"],
    ["start"],
    ["terminate"],
    ["extend"],
    ["ssh"],
    ["ssh-config"],
    ["notebook"],
    ["pools"],
    ["costs"],
    ["approvals"],
    ["approvals", "approve"],
    ["approvals", "reject"],
    ["jobs", "launch"],
    ["jobs", "list"],
    ["jobs", "show"],
    ["jobs", "logs"],
    ["jobs", "cancel"],
    ["jobs", "rerun"],
]


def test_the_console_script_is_this_app():
    """make install (pip install -e .) makes .venv/bin/gpu from pyproject's entry."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    module, _, name = project["project"]["scripts"]["gpu"].partition(":")
    assert getattr(importlib.import_module(module), name) is app
    assert {"typer", "httpx", "rich"} <= {
        requirement.split(">")[0].split("[")[0]
        for requirement in project["project"]["optional-dependencies"]["cli"]
    }
    assert "gpucli*" in project["tool"]["setuptools"]["packages"]["find"]["include"]


def test_gpu_help_lists_every_verb_and_the_exit_codes(gpu):
    result = gpu("--help")
    assert result.returncode == 0, result.stderr
    for verb in {verb[0] for verb in VERBS}:
        assert f" {verb} " in result.stdout
    assert "--install-completion" in result.stdout
    assert "3 a waited-on job" in " ".join(result.stdout.split())


@pytest.mark.parametrize("verb", VERBS, ids=" ".join)
def test_every_verbs_help_shows_an_example(verb):
    result = CliRunner().invoke(app, [*verb, "--help"], prog_name="gpu", env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    example = " ".join(result.output.split()).split("Example: ", 1)
    assert len(example) == 2 and example[1].startswith(f"gpu {' '.join(verb)}")


@pytest.fixture
def run(tmp_path):
    """gpu in this process (typer's runner), with a config folder of its own and no
    GPU_PORTAL_* variables: for what needs no portal, faster than a process each."""

    def invoke(*args: str, **env: str):
        clean = {"XDG_CONFIG_HOME": str(tmp_path), "GPU_PORTAL_URL": None}
        clean |= {"GPU_PORTAL_TOKEN": None, "GPU_PORTAL_PROJECT": None}
        return CliRunner().invoke(app, list(args), prog_name="gpu", env={**clean, **env})

    return invoke


def test_a_token_on_the_command_line_is_refused_with_the_environment_hint(gpu):
    result = gpu("hosts", "--token", "gpp_secret")
    assert result.returncode == 2
    assert "GPU_PORTAL_TOKEN" in result.stderr and "gpp_secret" not in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    "args",
    [["--token=gpp_secret", "types"], ["login", "http://127.0.0.1:9", "gpp_secret"]],
)
def test_a_token_anywhere_before_the_verbs_own_words_is_refused(run, args):
    result = run(*args)
    assert result.exit_code == 2
    assert "GPU_PORTAL_TOKEN" in result.stderr and "gpp_secret" not in result.output


def test_a_job_command_after_the_double_dash_may_say_anything(run):
    result = run("jobs", "launch", "--type", "g5.xlarge", "--image", "tf", "--", "echo gpp_")
    # Refused only because no portal is set, not because of the command's words.
    assert result.exit_code == 2 and "No portal to talk to" in result.stderr


def test_without_a_portal_or_a_token_gpu_says_how_to_sign_in(run):
    nothing = run("hosts")
    assert nothing.exit_code == 2 and "gpu login URL" in nothing.stderr
    no_token = run("hosts", GPU_PORTAL_URL="http://127.0.0.1:9")
    assert no_token.exit_code == 2
    assert "Not signed in" in no_token.stderr and "GPU_PORTAL_TOKEN" in no_token.stderr


def test_an_unreachable_portal_says_what_to_check_not_a_traceback(gpu):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again when the block ends: nothing listens
    result = gpu(
        "types", "--json", GPU_PORTAL_URL=f"http://127.0.0.1:{port}", GPU_PORTAL_TOKEN="gpp_x"
    )
    assert result.returncode == 4
    assert f"Could not reach the portal at http://127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_usage_errors_exit_2(run):
    result = run("order", "g5.xlarge", "--image", "tf", "--market", "cheap")
    assert result.exit_code == 2 and "cheap" in result.stderr


@pytest.mark.parametrize(("text", "expected"), [("8h", 8), ("8", 8), ("2d", 48), (" 4H ", 4)])
def test_durations_are_whole_hours(text, expected):
    assert hours(text) == expected


@pytest.mark.parametrize("text", ["0h", "90m", "1.5h", "soon"])
def test_other_durations_are_refused(text):
    with pytest.raises(typer.BadParameter):
        hours(text)


def test_only_a_newer_api_warns():
    assert newer_api_warning("1.0.0") is None
    assert newer_api_warning("1.0.7") is None
    assert newer_api_warning("0.9.0") is None
    assert newer_api_warning(None) is None
    assert "new fields" in newer_api_warning("1.1.0")
    assert "some commands may fail" in newer_api_warning("2.0.0")
