"""``gpu``: the portal from a terminal. The app, the guard that keeps tokens off the command
line, signing in and out, and the verbs of the other modules (the catalog and ordering in
orders.py, hosts in hosts.py, jobs in jobs.py, pools, costs and approvals in reports.py)."""

from __future__ import annotations

import getpass
import os
import socket
import sys
import webbrowser
from typing import Annotated
from urllib.parse import urlsplit

import typer
from typer.core import TyperGroup

from gpucli import config, hosts, jobs, orders, reports, version
from gpucli.client import EXIT_REFUSED, EXIT_USAGE, Portal, fail
from gpucli.config import TOKEN_PREFIX, TOKEN_VARIABLE, Settings
from gpucli.output import JsonOption, fields, note, print_json, when

TOKEN_HINT = (
    "gpu takes no token on its command line, where shell history and `ps` would keep it. "
    f"Run `gpu login URL` (it asks for the token without echoing it), or set {TOKEN_VARIABLE} "
    "in the environment."
)


class TokenGuard(TyperGroup):
    """Refuses a token anywhere on the command line (before ``--``, after which a job's own
    command begins) before any verb parses it."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        for arg in args:
            if arg == "--":
                break
            if arg == "--token" or arg.startswith(("--token=", TOKEN_PREFIX)):
                typer.echo(TOKEN_HINT, err=True)
                ctx.exit(EXIT_USAGE)
        return super().parse_args(ctx, args)


app = typer.Typer(
    cls=TokenGuard,
    name="gpu",
    help="Order GPU hosts, run jobs and read costs on the GPU host portal, from a terminal.",
    epilog="Start with: gpu login https://portal.example.org. Exit codes: 0 done, 1 refused "
    "by the portal (its sentence on stderr), 2 usage, 3 a waited-on job or host that ended "
    "failed, 4 the portal could not be reached.",
    no_args_is_help=True,
    # A bug's traceback must never print local variables: one of them is the token.
    pretty_exceptions_show_locals=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gpu {version()}")
        raise typer.Exit()


@app.callback()
def root(
    show_version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Order GPU hosts, run jobs and read costs on the GPU host portal, from a terminal."""


def _portal_url(url: str) -> str:
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise typer.BadParameter(
            f"{url!r} is not a web address, such as https://portal.example.org"
        )
    if parts.scheme == "http" and parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        note(
            f"warning: {parts.hostname} is plain http: the token would cross the network "
            "unencrypted."
        )
    return url.strip().rstrip("/")


def _read_secret(prompt: str, from_stdin: bool) -> str:
    if from_stdin:
        return sys.stdin.readline().strip()
    try:
        return getpass.getpass(prompt).strip()
    except (EOFError, KeyboardInterrupt):
        typer.echo(err=True)
        raise typer.Exit(EXIT_USAGE) from None


def own_token(portal: Portal, token: str) -> dict | None:
    """The row of the token gpu signs in with, among the caller's own (its prefix matches)."""
    rows = portal.everything("/api/v1/auth/tokens/")
    return next((row for row in rows if token.startswith(row["prefix"])), None)


@app.command(
    epilog="Example: gpu login https://portal.example.org (then paste the token the page "
    "shows). Scripts: printf '%s' \"$TOKEN\" | gpu login URL --stdin, or set GPU_PORTAL_URL "
    "and GPU_PORTAL_TOKEN."
)
def login(
    url: Annotated[str, typer.Argument(help="The portal's address.")],
    username: Annotated[
        str | None,
        typer.Option("--username", "-u", help="Sign in with your password instead of a page."),
    ] = None,
    no_browser: Annotated[
        bool, typer.Option("--no-browser", help="Print the token page's address only.")
    ] = False,
    stdin: Annotated[
        bool,
        typer.Option("--stdin", help="Read the token (with --username, the password) from stdin."),
    ] = False,
    days: Annotated[
        int | None, typer.Option(help="With --username: how long the new token lives.")
    ] = None,
) -> None:
    """Sign in: store a personal API token for URL in ~/.config/gpu-portal/ (mode 600).

    Opens the portal's API tokens page, where you create a token, and asks you to paste it
    (it is not echoed). With --username it asks for your password instead and creates a token
    itself."""
    url = _portal_url(url)
    # Is a portal there at all? Its API answers 401 with its error body to no credentials.
    Portal(Settings(url=url), need_token=False).json(
        "GET", "/api/v1/auth/tokens/", allow=frozenset({401})
    )
    page = f"{url}/account/tokens/"
    if username:
        password = _read_secret(f"Password for {username} on {url}: ", stdin)
        body = {"username": username, "password": password, "name": _token_name()}
        if days is not None:
            body["days"] = days
        anonymous = Portal(Settings(url=url), need_token=False)
        response = anonymous.request(
            "POST", "/api/v1/auth/tokens/", json=body, allow=frozenset({401})
        )
        if response.status_code == 401:
            fail(response.json().get("detail", "Wrong username or password."), EXIT_REFUSED)
        token = response.json()["token"]
    else:
        note(f"Create a token on {page} and paste it here.")
        if not (no_browser or stdin) and _has_desktop():
            webbrowser.open(page)
        token = _read_secret("Token (not shown): ", stdin)
    if not token.startswith(TOKEN_PREFIX):
        fail(f"That is not a portal token (they start {TOKEN_PREFIX}); copy it from {page}.", 2)
    portal = Portal(Settings(url=url, token=token))
    response = portal.request("GET", "/api/v1/auth/tokens/", allow=frozenset({401}))
    if response.status_code == 401:
        fail(
            f"The portal did not accept that token: it is unknown, expired or revoked. "
            f"Create a new one on {page}.",
            EXIT_REFUSED,
        )
    row = own_token(portal, token)
    path = config.save(url=url, token=token)
    name = f"{row['name']} ({row['prefix']}…)" if row else "the token"
    expires = f", valid until {when(row['expires_at'])}" if row else ""
    note(f"Signed in to {url} with {name}{expires}. Saved in {path}.")
    if config.load().token != token:
        note(f"note: {TOKEN_VARIABLE} is set in this shell and overrides the saved token.")


def _has_desktop() -> bool:
    """Whether a browser window can open here: without a display, Python's webbrowser would
    start a text browser (lynx, w3m) in this very terminal, over the prompt."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _token_name() -> str:
    return f"gpu on {socket.gethostname()}"[:100]


@app.command(epilog="Example: gpu whoami --json")
def whoami(as_json: JsonOption = False) -> None:
    """Which portal gpu talks to, and the token it signs in with (never the secret)."""
    settings = config.load()
    portal = Portal(settings)
    row = own_token(portal, settings.token or "")
    answer = {"url": settings.url, "token": row}
    if as_json:
        print_json(answer)
        return
    if row is None:
        fields([("portal", settings.url), ("token", "valid, not one of yours to list")])
        return
    fields(
        [
            ("portal", settings.url),
            ("token", f"{row['name']} ({row['prefix']}…)"),
            ("expires", when(row["expires_at"])),
            ("last used", when(row["last_used_at"])),
        ]
    )


@app.command(epilog="Example: gpu logout (--keep leaves the token valid on the portal)")
def logout(
    keep: Annotated[
        bool, typer.Option("--keep", help="Forget the token but do not revoke it.")
    ] = False,
) -> None:
    """Revoke the saved token on the portal and forget it."""
    stored = config.read_file()
    if not stored.get("token"):
        note("No token is saved; nothing to do.")
        return
    settings = Settings(url=stored.get("url"), token=stored["token"])
    if not keep:
        portal = Portal(settings)
        response = portal.request("GET", "/api/v1/auth/tokens/", allow=frozenset({401}))
        row = own_token(portal, settings.token) if response.status_code != 401 else None
        if row is not None:
            portal.request("DELETE", f"/api/v1/auth/tokens/{row['id']}/")
            note(f"Revoked {row['name']} ({row['prefix']}…) on {settings.url}.")
    config.save(url=settings.url or "", token=None)
    note("Forgot the saved token.")
    if config.load().token:
        note(f"note: {TOKEN_VARIABLE} is still set in this shell.")


orders.register(app)
hosts.register(app)
jobs.register(app)
reports.register(app)
