"""Request size limits: a request past one is refused (413/414/431) with an audit row, before
anything reads it."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse


@dataclass(frozen=True)
class Refusal:
    """A request refused before anything reads it: too long a URL or header, too big a body."""

    status: int
    code: str
    detail: str

    def response(self, request: HttpRequest) -> HttpResponse:
        if request.path_info.startswith("/api/"):
            return JsonResponse({"code": self.code, "detail": self.detail}, status=self.status)
        return HttpResponse(self.detail, status=self.status, content_type="text/plain")


def content_length(request: HttpRequest) -> int | None:
    """The Content-Length the caller claimed, or None when it claimed none that reads."""
    length = request.META.get("CONTENT_LENGTH") or ""
    # int() of more than 4,300 digits raises; no body is that long.
    if not (length.isascii() and length.isdigit()) or len(length) > 30:
        return None
    return int(length)


def request_refusal(request: HttpRequest) -> Refusal | None:
    """Why the request is refused by the limits in settings, or None.

    Checked first, on lengths alone: nothing of an oversized request is parsed, resolved,
    redacted or handed to a view. (gunicorn refuses longer lines and headers itself, before
    Django: see gunicorn.conf.py.)
    """
    path = len(request.path)
    if path > settings.PORTAL_MAX_PATH_LENGTH:
        return Refusal(
            414,
            "uri_too_long",
            f"The path is {path} characters long; "
            f"the portal accepts at most {settings.PORTAL_MAX_PATH_LENGTH}.",
        )
    query = len(request.META.get("QUERY_STRING", ""))
    if query > settings.PORTAL_MAX_QUERY_LENGTH:
        return Refusal(
            414,
            "uri_too_long",
            f"The query string is {query} characters long; "
            f"the portal accepts at most {settings.PORTAL_MAX_QUERY_LENGTH}.",
        )
    for name, value in request.META.items():
        if (
            (name.startswith("HTTP_") or name == "CONTENT_TYPE")
            and isinstance(value, str)
            and len(value) > settings.PORTAL_MAX_HEADER_LENGTH
        ):
            header = name.removeprefix("HTTP_").replace("_", "-").title()
            return Refusal(
                431,
                "header_too_large",
                f"The {header} header is {len(value)} characters long; "
                f"the portal accepts at most {settings.PORTAL_MAX_HEADER_LENGTH}.",
            )
    size = content_length(request) or 0
    limit, where = body_limit(request)
    if limit is not None and size > limit:
        return Refusal(
            413,
            "body_too_large",
            f"The body is {size} bytes; the portal accepts at most {limit} bytes {where}.",
        )
    return None


def body_limit(request: HttpRequest) -> tuple[int | None, str]:
    """The largest body this request may carry, and where that limit holds (for the sentence):
    a host's JupyterLab takes notebooks and files (under /notebook/, passed through unparsed),
    a multipart form takes uploads, any other body is JSON or a form."""
    if request.path_info.startswith("/notebook/"):
        return settings.PORTAL_NOTEBOOK_MAX_BODY_BYTES, "in a request to a host's JupyterLab"
    if request.META.get("CONTENT_TYPE", "").startswith("multipart/form-data"):
        return settings.PORTAL_MAX_UPLOAD_BYTES, "in an upload"
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE, "in a request body"
