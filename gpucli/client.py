"""The one way gpu talks to the portal: an httpx client with the token, gpu's version in its
User-Agent, and every failure turned into a sentence on stderr and an exit code (never a
traceback): 1 when the portal refused (its own sentence), 2 when gpu lacks what it needs to
ask (no portal or no token), 4 when the portal could not be reached."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NoReturn

import httpx
import typer

from gpucli import API_VERSION, version
from gpucli.config import PROJECT_VARIABLE, TOKEN_VARIABLE, URL_VARIABLE, Settings, load

EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_FAILED = 3
EXIT_UNREACHABLE = 4

TIMEOUT_SECONDS = 30.0
PAGE_SIZE = 500  # the API's largest page


def fail(message: str, code: int) -> NoReturn:
    typer.echo(message, err=True)
    raise typer.Exit(code)


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.strip().split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def newer_api_warning(served: str | None) -> str | None:
    """What to say when the portal's API is newer than the one this gpu was written for."""
    if not served:
        return None
    theirs, ours = _version(served), _version(API_VERSION)
    if theirs[:2] <= ours[:2]:
        return None
    if theirs[0] > ours[0]:
        consequence = "some commands may fail"
    else:
        consequence = "new fields and filters are not shown"
    return (
        f"warning: the portal's API is version {served} and this gpu ({version()}) knows "
        f"{API_VERSION}: {consequence}. Upgrade gpu (pip install -U 'gpu-portal[cli]')."
    )


class Portal:
    """The portal at ``settings.url``, spoken to with ``settings.token``."""

    def __init__(self, settings: Settings, *, need_token: bool = True) -> None:
        if not settings.url:
            fail(f"No portal to talk to: run `gpu login URL`, or set {URL_VARIABLE}.", EXIT_USAGE)
        if need_token and not settings.token:
            fail(
                f"Not signed in to {settings.url}: run `gpu login {settings.url}`, or set "
                f"{TOKEN_VARIABLE}.",
                EXIT_USAGE,
            )
        self.url = settings.url
        headers = {"User-Agent": f"gpu-cli/{version()}", "Accept": "application/json"}
        if settings.token:
            headers["Authorization"] = f"Bearer {settings.token}"
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=TIMEOUT_SECONDS)
        self.warned = False

    def request(
        self, method: str, path: str, *, allow: frozenset[int] = frozenset(), **kwargs: Any
    ) -> httpx.Response:
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.TimeoutException:
            fail(
                f"The portal at {self.url} did not answer within {TIMEOUT_SECONDS:.0f} s. "
                "Try again; if it goes on, ask its operators.",
                EXIT_UNREACHABLE,
            )
        except httpx.TransportError as error:
            fail(
                f"Could not reach the portal at {self.url} ({error}). Check the address "
                f"(`gpu login URL` or {URL_VARIABLE}) and your network.",
                EXIT_UNREACHABLE,
            )
        self._warn_if_newer(response)
        if response.is_success or response.status_code in allow:
            return response
        self._refuse(response)

    def _warn_if_newer(self, response: httpx.Response) -> None:
        warning = newer_api_warning(response.headers.get("API-Version"))
        if warning and not self.warned:
            self.warned = True
            typer.echo(warning, err=True)

    def _refuse(self, response: httpx.Response) -> NoReturn:
        status = response.status_code
        detail = _detail(response)
        if status == 401:
            fail(
                f"{detail or 'The portal did not accept the token.'} Run `gpu login {self.url}` "
                f"for a new token (or set {TOKEN_VARIABLE}).",
                EXIT_REFUSED,
            )
        if status >= 500:
            request_id = response.headers.get("X-Request-ID", "none")
            fail(
                f"The portal failed ({status}). Try again; if it goes on, give its operators the "
                f"request id {request_id}.",
                EXIT_REFUSED,
            )
        fail(detail or f"The portal refused ({status}).", EXIT_REFUSED)

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.request(method, path, **kwargs)
        if response.status_code == 204:
            return None
        try:
            return response.json()
        except ValueError:
            kind = response.headers.get("Content-Type", "no content type")
            fail(
                f"{self.url} does not answer as the portal's API ({path}: {kind}). "
                "Check the address.",
                EXIT_REFUSED,
            )

    def get(self, path: str, params: Any = None) -> Any:
        return self.json("GET", path, params=params)

    def post(self, path: str, body: Any = None, **kwargs: Any) -> Any:
        if body is None:
            return self.json("POST", path, **kwargs)
        return self.json("POST", path, json=body, **kwargs)

    def pages(self, path: str, params: dict | None = None) -> Iterator[dict]:
        """Every row of a list, page after page."""
        query = {**(params or {}), "page_size": PAGE_SIZE}
        page = self.get(path, params=query)
        while True:
            yield from page["results"]
            if not page.get("next"):
                return
            page = self.get(page["next"])

    def everything(self, path: str, params: dict | None = None) -> list[dict]:
        return list(self.pages(path, params))


def _detail(response: httpx.Response) -> str:
    """The portal's sentence from its error shape ``{"code", "detail", "fields"}``."""
    try:
        body = response.json()
    except ValueError:
        return ""
    if isinstance(body, dict) and isinstance(body.get("detail"), str):
        return body["detail"]
    return ""


def connect() -> Portal:
    """The portal of the saved settings (or the environment), signed in."""
    return Portal(load())


def default_project(portal: Portal, given: str | None) -> str:
    """The project an order or job goes to: the one given (or GPU_PORTAL_PROJECT), else the
    caller's only project."""
    chosen = given or load().project
    if chosen:
        return chosen
    slugs = [row["slug"] for row in portal.pages("/api/v1/projects/", {"is_active": "true"})]
    if len(slugs) == 1:
        return slugs[0]
    if not slugs:
        fail("You are in no open project: ask an admin to add you to one.", EXIT_REFUSED)
    fail(
        f"You can order in {len(slugs)} projects ({', '.join(slugs[:8])}): say which with "
        f"--project, or set {PROJECT_VARIABLE}.",
        EXIT_USAGE,
    )
