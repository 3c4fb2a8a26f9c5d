"""Request-wide rule: no value with a NUL byte reaches a lookup. (Every page needs a login
through Django's own LoginRequiredMiddleware; DRF marks its views login-not-required, so the
API answers 401 itself, and the schema and its docs are public.)"""

from __future__ import annotations

from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.http import JsonResponse
from django.http.request import UnreadablePostError
from django.shortcuts import render

from portal.rest import has_nul, nul_error_body


class RejectNulMiddleware:
    """A NUL byte in a URL part, a query parameter or a form field answers 400 naming the field.

    PostgreSQL cannot store or compare text holding a NUL, so a lookup with one fails inside the
    database (a 500) unless it is refused first. One check here covers every route's lookup
    kwargs, every filter and page form; JSON bodies are checked by their serializer fields.
    It runs after the login rule, so anonymous visitors are still sent to sign in first.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_view(self, request, view_func, view_args, view_kwargs):
        fields = [name for name, value in view_kwargs.items() if has_nul(value)]
        if any(has_nul(value) for value in view_args):
            fields.append("path")
        fields += _nul_fields(request.GET)
        if request.method == "POST" and request.content_type in FORM_TYPES:
            try:
                fields += _nul_fields(request.POST)
            except (SuspiciousOperation, RequestDataTooBig, UnreadablePostError):
                # Too many fields, too large, cut off: nothing here to look up. The API's
                # parsers answer it in the error shape; a page gets Django's 400.
                if not request.path_info.startswith("/api/"):
                    raise
        if not fields:
            return None
        body = nul_error_body(fields)
        if request.path_info.startswith("/api/"):
            return JsonResponse(body, status=400)
        return render(request, "portal/bad_request.html", {"message": body["detail"]}, status=400)


FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def _nul_fields(data) -> list[str]:
    return [name for name, values in data.lists() if has_nul(name) or any(map(has_nul, values))]
